// A peer without the cluster token that reaches a prefill rank's published
// port on 127.0.0.1 and sends its gate an exit, anonymously, as CAF lets any
// connected node do (README "Hostile bytes on the control plane").
// Usage: hostile_peer PORT exit|kill
//   exit: exit_reason::user_shutdown (the gate must ignore it), then an
//         auth_hello whose answer shows the gate is still up (exit 0), or 1.
//   kill: exit_reason::kill (CAF applies it before any handler), then the
//         same hello; exits 0 once the exit went out, whatever the answer.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "messages/messages.hpp"
#include "node/auth.hpp"

int main(int argc, char** argv) {
  using namespace layerstream;
  if (argc != 3 || (std::string{argv[2]} != "exit" && std::string{argv[2]} != "kill")) {
    std::cerr << "usage: hostile_peer PORT exit|kill\n";
    return 2;
  }
  const auto port = static_cast<uint16_t>(std::strtoul(argv[1], nullptr, 10));
  const bool kill = std::string{argv[2]} == "kill";
  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  add_message_types(cfg);
  caf::actor_system sys{cfg};
  // Test traffic: loopback only.
  auto gate = sys.middleman().remote_actor<gate_actor>("127.0.0.1", port);
  if (!gate) {
    std::cerr << "hostile_peer: cannot reach 127.0.0.1:" << port << ": " << sys.render(gate.error())
              << "\n";
    return 1;
  }
  caf::anon_send_exit(*gate, kill ? caf::exit_reason::kill : caf::exit_reason::user_shutdown);
  // The hello goes out on the same connection after the exit: its answer
  // (or the gate's absence) says the exit was delivered.
  bool answered = false;
  caf::scoped_actor self{sys};
  self->request(*gate, std::chrono::seconds(5),
                auth_hello{std::vector<uint8_t>(auth_nonce_bytes, 7)})
      .receive([&](auth_challenge&) { answered = true; },
               [&](caf::error& err) {
                 std::cerr << "hostile_peer: no challenge: " << sys.render(err) << "\n";
               });
  std::cout << "hostile_peer: sent " << argv[2] << "; the gate "
            << (answered ? "answers" : "is gone") << "\n";
  return kill || answered ? 0 : 1;
}
