// The gtest main of every gtest binary here. ctest takes a test as skipped
// by its exit code alone (77, set by layerstream_discover_gtests), so a
// test that skips and still fails after it (a sanitizer report at exit, a
// crash in a destructor) counts as failed. gtest_discover_tests also marks
// a test skipped when its output holds gtest's "[  SKIPPED ]" banner, and
// ctest cannot drop that pattern, so skips are printed as "[  SKIP    ]".
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

namespace {

// gtest's own printer for everything but the lines about a skipped test.
class skip_printer : public ::testing::EmptyTestEventListener {
 public:
  explicit skip_printer(::testing::TestEventListener* pretty) : pretty_(pretty) {}

  void OnTestProgramStart(const ::testing::UnitTest& u) override { pretty_->OnTestProgramStart(u); }
  void OnTestIterationStart(const ::testing::UnitTest& u, int i) override {
    pretty_->OnTestIterationStart(u, i);
  }
  void OnEnvironmentsSetUpStart(const ::testing::UnitTest& u) override {
    pretty_->OnEnvironmentsSetUpStart(u);
  }
  void OnEnvironmentsSetUpEnd(const ::testing::UnitTest& u) override {
    pretty_->OnEnvironmentsSetUpEnd(u);
  }
  void OnTestSuiteStart(const ::testing::TestSuite& s) override { pretty_->OnTestSuiteStart(s); }
  void OnTestStart(const ::testing::TestInfo& t) override { pretty_->OnTestStart(t); }
  void OnTestDisabled(const ::testing::TestInfo& t) override { pretty_->OnTestDisabled(t); }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    pretty_->OnTestPartResult(r);
  }
  void OnTestEnd(const ::testing::TestInfo& t) override {
    if (!t.result()->Skipped())
      return pretty_->OnTestEnd(t);
    std::printf("[  SKIP    ] %s.%s (%lld ms)\n", t.test_suite_name(), t.name(),
                static_cast<long long>(t.result()->elapsed_time()));
    std::fflush(stdout);
  }
  void OnTestSuiteEnd(const ::testing::TestSuite& s) override { pretty_->OnTestSuiteEnd(s); }
  void OnEnvironmentsTearDownStart(const ::testing::UnitTest& u) override {
    pretty_->OnEnvironmentsTearDownStart(u);
  }
  void OnEnvironmentsTearDownEnd(const ::testing::UnitTest& u) override {
    pretty_->OnEnvironmentsTearDownEnd(u);
  }
  void OnTestIterationEnd(const ::testing::UnitTest& u, int i) override {
    if (u.skipped_test_count() == 0)
      return pretty_->OnTestIterationEnd(u, i);
    std::printf("[==========] %d tests ran. (%lld ms total)\n", u.test_to_run_count(),
                static_cast<long long>(u.elapsed_time()));
    std::printf("[  PASSED  ] %d tests.\n", u.successful_test_count());
    print_tests(u, "[  SKIP    ]", u.skipped_test_count(),
                [](const ::testing::TestResult& r) { return r.Skipped(); });
    print_tests(u, "[  FAILED  ]", u.failed_test_count(),
                [](const ::testing::TestResult& r) { return r.Failed(); });
    std::fflush(stdout);
  }
  void OnTestProgramEnd(const ::testing::UnitTest& u) override { pretty_->OnTestProgramEnd(u); }

 private:
  template <class Pick>
  static void print_tests(const ::testing::UnitTest& u, const char* banner, int count, Pick pick) {
    if (count == 0)
      return;
    std::printf("%s %d tests, listed below:\n", banner, count);
    for (int i = 0; i < u.total_test_suite_count(); ++i) {
      const auto& suite = *u.GetTestSuite(i);
      for (int j = 0; j < suite.total_test_count(); ++j) {
        const auto& test = *suite.GetTestInfo(j);
        if (test.should_run() && pick(*test.result()))
          std::printf("%s %s.%s\n", banner, suite.name(), test.name());
      }
    }
  }

  std::unique_ptr<::testing::TestEventListener> pretty_;
};

} // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (auto* pretty = listeners.default_result_printer()) {
    listeners.Release(pretty);
    listeners.Append(new skip_printer(pretty));
  }
  const int result = RUN_ALL_TESTS();
  const auto& run = *::testing::UnitTest::GetInstance();
  const bool all_skipped =
      run.test_to_run_count() > 0 && run.skipped_test_count() == run.test_to_run_count();
  return result == 0 && all_skipped ? 77 : result;
}
