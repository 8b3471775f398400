// The one translation unit of actors_test that holds CAF's test main.
#define CAF_SUITE actors
#include <caf/test/unit_test_impl.hpp>
