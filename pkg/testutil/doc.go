// Package testutil holds the test helpers every package of meshfed shares:
// bounded waits, golden files, a real apiserver and a TCP proxy that can
// be cut. Only tests (and the e2e framework, which
// is test code) import it; e2e/imports_test.go checks that.
//
// Waits poll a condition that returns nil when met and otherwise an error
// saying why not, so that a failure names what was last seen:
//
//	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
//		if got := count(); got != 3 {
//			return fmt.Errorf("count %d, want 3", got)
//		}
//		return nil
//	})
//
// Eventually waits for something to happen; Consistently is the negative
// check, that something does not happen for a while (instead of
// sleep-then-look); Poll is Eventually's loop for callers without a
// testing.TB, returning the error. The waits poll real time: they are for
// tests of real processes and goroutines. A test of a component that takes
// an injected clock drives that clock instead.
//
// TCPProxy stands in front of a real server (a remote apiserver) and is
// cut and restored on the same address, so that a test sees what an
// outage and a restart look like from the client's side.
//
// Golden compares output with a file under testdata/; `go test -update`
// rewrites the files instead (the package registers the -update flag, so a
// test package that imports testutil must not register its own).
package testutil
