#!/usr/bin/env bash
# `layerstream blocks`: bad input exits 2 with one line naming the field (and
# the array index); good input prints the blocks. Usage: blocks_cli_test.sh BIN
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
good='{"src_pages":[1,2,3,9],"dst_pages":[5,6,7,8],"src_k_ptrs":[1000],"dst_k_ptrs":[50000],"src_v_ptrs":[3000],"dst_v_ptrs":[70000],"item_lens":[16,32],"layer":0,"cp_size":1,"cp_rank":0}'

check_refused() { # name, json, expected substring of the message
  printf '%s' "$2" >"$tmp/in.json"
  out=$("$bin" blocks --input "$tmp/in.json" 2>"$tmp/err"); rc=$?
  lines=$(wc -l <"$tmp/err")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -q -- "$3" "$tmp/err" || [ -n "$out" ]; then
    echo "FAIL $1: exit $rc, stderr: $(cat "$tmp/err")"; fails=$((fails + 1))
  else
    echo "ok   $1: $(cat "$tmp/err")"
  fi
}

printf '%s' "$good" >"$tmp/in.json"
out=$("$bin" blocks --input "$tmp/in.json")
want='{"blocks":[[1016,50080,48],[1144,50128,16],[3032,70160,96],[3288,70256,32]]}'
if [ "$out" != "$want" ]; then echo "FAIL good input: $out"; fails=$((fails + 1)); else echo "ok   good input"; fi

# A later chunk without total_pages: the request ends with it. One rank
# sends it all; with two the split needs the request's size.
printf '%s' "${good/\"cp_rank\":0/\"cp_rank\":0,\"chunk_start\":4}" >"$tmp/in.json"
out=$("$bin" blocks --input "$tmp/in.json")
if [ "$out" != "$want" ]; then echo "FAIL later chunk, one rank: $out"; fails=$((fails + 1)); else echo "ok   later chunk, one rank"; fi
check_refused "later chunk of two ranks without total_pages" \
  "${good/\"cp_size\":1,\"cp_rank\":0/\"cp_size\":2,\"cp_rank\":0,\"chunk_start\":4}" \
  "total_pages: missing; with chunk_start 4 and cp_size 2"
check_refused "negative page" "${good/\[1,2,3,9\]/[1,-2,3,9]}" "src_pages\[1\]"
check_refused "float layer" "${good/\"layer\":0/\"layer\":0.5}" "layer"
check_refused "page above 2^64" "${good/\[1,2,3,9\]/[1,2,3,18446744073709551616]}" "src_pages\[3\]"
check_refused "missing item_lens" "${good/\"item_lens\":\[16,32\],/}" "item_lens: missing"
check_refused "cp_rank not below cp_size" "${good/\"cp_rank\":0/\"cp_rank\":1}" "cp_rank"
check_refused "cp_size 0" "${good/\"cp_size\":1/\"cp_size\":0}" "cp_size"
check_refused "v pointer lists differ" "${good/\"dst_v_ptrs\":\[70000\]/\"dst_v_ptrs\":[]}" "dst_v_ptrs"
check_refused "item_lens length 3" "${good/\[16,32\]/[16,32,48]}" "item_lens"
check_refused "chunk past total" "${good/\"cp_rank\":0/\"cp_rank\":0,\"chunk_start\":2,\"total_pages\":5}" "chunk_start"
check_refused "address overflow" "${good/\[50000\]/[18446744073709551600]}" "overflow"
check_refused "array index named" "[$good,${good/\"layer\":0/\"layer\":7}]" "\[1\]: layer"
check_refused "not JSON" "{" "not valid JSON"
# total_pages misspelled: its default (the list length) would give other blocks.
check_refused "unknown key" "${good/\"cp_rank\":0/\"cp_rank\":0,\"total_page\":8}" '"total_page": unknown key'
deep=$(printf '[%.0s' $(seq 100000))1$(printf ']%.0s' $(seq 100000))
check_refused "deeply nested value" "${good/\"layer\":0/\"layer\":$deep}" "layer: expected an unsigned 64-bit integer, got an array"
check_refused "deeply nested page" "${good/\[1,2,3,9\]/[$deep]}" "src_pages\[0\]: expected an unsigned 64-bit integer, got an array"
"$bin" blocks --input "$tmp" >/dev/null 2>"$tmp/err"; rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "not a regular file or a pipe" "$tmp/err"; then
  echo "FAIL directory as input: exit $rc, stderr: $(cat "$tmp/err")"; fails=$((fails + 1))
else
  echo "ok   directory as input: $(cat "$tmp/err")"
fi
rm -f "$tmp/in.json"
"$bin" blocks --input "$tmp/in.json" >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL missing file exit $rc"; fails=$((fails + 1)); }

echo "$fails failed"
[ "$fails" -eq 0 ]
