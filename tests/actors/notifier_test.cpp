// The notifier: one event and one message per layer, nothing else.
#define CAF_SUITE notifier
#include "fixture.hpp"

#include "actors/notifier.hpp"

using namespace layerstream;
using namespace layerstream::testing;

CAF_TEST_FIXTURE_SCOPE(notifier_tests, actor_fixture)

CAF_TEST(the notifier records one event and sends one layer_end to the manager) {
  auto mgr = sys.spawn(manager_impl, transport, manager_config{});
  run();
  self->request(mgr, caf::infinite, setup{{make_request(1, 2, 3), make_request(2, 2, 3)}});
  run();
  layer_notifier notify{mgr, events};
  notify(2);
  CAF_CHECK_EQUAL(events.count(), 1u);
  expect((layer_end), from(_).to(mgr).with(layer_end{2, events.recorded(0)}));
  disallow((layer_end), from(_).to(mgr));
  // The manager, not the notifier, fans out: both contexts wait on the one event.
  sched.run();
  CAF_CHECK_EQUAL(events.recorded(0)->waiting(), 2u);
}

CAF_TEST_FIXTURE_SCOPE_END()
