// keyed_fifo: arrival order, and entries that leave early by key.
#include "common/keyed_fifo.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using layerstream::keyed_fifo;

std::vector<int> keys_in_order(keyed_fifo<int, std::string>& q) {
  std::vector<int> out;
  q.for_each([&](int key, const std::string&) { out.push_back(key); });
  return out;
}

TEST(KeyedFifo, EntriesLeaveHeadFirstInTheOrderTheyCame) {
  keyed_fifo<int, std::string> q;
  EXPECT_TRUE(q.empty());
  EXPECT_TRUE(q.push_back(3, "c"));
  EXPECT_TRUE(q.push_back(1, "a"));
  EXPECT_TRUE(q.push_back(2, "b"));
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(q.front_key(), 3);
  EXPECT_EQ(q.front(), "c");
  EXPECT_EQ(q.pop_front(), "c");
  EXPECT_EQ(q.pop_front(), "a");
  EXPECT_FALSE(q.contains(1));
  EXPECT_EQ(q.find(1), nullptr);
  EXPECT_EQ(q.pop_front(), "b");
  EXPECT_TRUE(q.empty());
}

TEST(KeyedFifo, AKeyThatIsInAlreadyIsRefusedAndTheFirstEntryKept) {
  keyed_fifo<int, std::string> q;
  EXPECT_TRUE(q.push_back(7, "first"));
  EXPECT_FALSE(q.push_back(7, "second"));
  EXPECT_EQ(q.size(), 1u);
  ASSERT_NE(q.find(7), nullptr);
  EXPECT_EQ(*q.find(7), "first");
}

TEST(KeyedFifo, AnEntryTakenFromTheMiddleLeavesTheOthersInOrder) {
  keyed_fifo<int, std::string> q;
  for (int k = 1; k <= 5; ++k)
    ASSERT_TRUE(q.push_back(k, std::to_string(k)));
  EXPECT_EQ(q.position(4), 3u);
  auto taken = q.take(3);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(*taken, "3");
  EXPECT_FALSE(q.take(3).has_value()) << "an entry was taken twice";
  EXPECT_FALSE(q.position(3).has_value());
  EXPECT_EQ(q.position(4), 2u);
  EXPECT_EQ(keys_in_order(q), (std::vector<int>{1, 2, 4, 5}));
  // The key is free again: it comes back at the tail.
  EXPECT_TRUE(q.push_back(3, "again"));
  EXPECT_EQ(keys_in_order(q), (std::vector<int>{1, 2, 4, 5, 3}));
  *q.find(5) = "changed";
  EXPECT_EQ(q.take(5), "changed");
}

TEST(KeyedFifo, AMovedQueueKeepsFindingItsEntries) {
  keyed_fifo<int, std::string> q;
  ASSERT_TRUE(q.push_back(1, "a"));
  ASSERT_TRUE(q.push_back(2, "b"));
  keyed_fifo<int, std::string> moved{std::move(q)};
  ASSERT_NE(moved.find(2), nullptr);
  EXPECT_EQ(*moved.find(2), "b");
  EXPECT_EQ(moved.take(1), "a");
  EXPECT_EQ(moved.front_key(), 2);
  // Move-assigned over a queue with entries of its own.
  keyed_fifo<int, std::string> other;
  ASSERT_TRUE(other.push_back(9, "z"));
  other = std::move(moved);
  EXPECT_FALSE(other.contains(9));
  ASSERT_NE(other.find(2), nullptr);
  EXPECT_EQ(other.take(2), "b");
  EXPECT_TRUE(other.empty());
}

} // namespace
