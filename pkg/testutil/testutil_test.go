package testutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a testing.TB that records failures instead of ending the
// test, so the helpers' failures can be asserted.
type recorder struct {
	testing.TB
	ctx context.Context

	mu     sync.Mutex // guards failed and msgs
	failed bool
	msgs   []string
}

func (r *recorder) Helper()                  {}
func (r *recorder) Context() context.Context { return r.ctx }
func (r *recorder) Fatal(args ...any)        { r.fail(fmt.Sprint(args...)) }
func (r *recorder) Fatalf(f string, a ...any) {
	r.fail(fmt.Sprintf(f, a...))
}
func (r *recorder) Errorf(f string, a ...any) { r.fail(fmt.Sprintf(f, a...)) }

func (r *recorder) fail(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.msgs = append(r.msgs, msg)
}

func (r *recorder) result() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed, strings.Join(r.msgs, "\n")
}

func newRecorder(t *testing.T) *recorder { return &recorder{TB: t, ctx: t.Context()} }

func TestPoll(t *testing.T) {
	n := 0
	if err := Poll(t.Context(), time.Second, time.Millisecond, func() error {
		if n++; n < 3 {
			return fmt.Errorf("attempt %d", n)
		}
		return nil
	}); err != nil || n != 3 {
		t.Errorf("Poll: %v after %d calls", err, n)
	}
	sentinel := errors.New("never")
	err := Poll(t.Context(), 20*time.Millisecond, 5*time.Millisecond, func() error { return sentinel })
	if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), "attempts") {
		t.Errorf("Poll timeout: %v", err)
	}
	if err := Poll(t.Context(), time.Second, 0, func() error { return nil }); !errors.Is(err, ErrBadInterval) {
		t.Errorf("Poll with interval 0: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	calls := 0
	if err := Poll(ctx, 0, time.Millisecond, func() error { calls++; return sentinel }); !errors.Is(err, sentinel) || calls != 1 {
		t.Errorf("Poll with a done context: %v after %d calls", err, calls)
	}
}

func TestEventually(t *testing.T) {
	r := newRecorder(t)
	n := 0
	Eventually(r, time.Second, time.Millisecond, func() error {
		if n++; n < 3 {
			return fmt.Errorf("attempt %d", n)
		}
		return nil
	})
	if failed, msg := r.result(); failed || n != 3 {
		t.Errorf("Eventually failed (%s) after %d calls", msg, n)
	}

	r = newRecorder(t)
	Eventually(r, 20*time.Millisecond, 5*time.Millisecond, func() error { return errors.New("count 2, want 3") })
	if failed, msg := r.result(); !failed || !strings.Contains(msg, "count 2, want 3") {
		t.Errorf("Eventually of a condition never met: failed %v, message %q", failed, msg)
	}
}

func TestConsistently(t *testing.T) {
	r := newRecorder(t)
	n := 0
	Consistently(r, 20*time.Millisecond, 2*time.Millisecond, func() error { n++; return nil })
	if failed, msg := r.result(); failed || n < 2 {
		t.Errorf("Consistently of a condition that holds: failed %v (%s) after %d calls", failed, msg, n)
	}

	r = newRecorder(t)
	n = 0
	start := time.Now()
	Consistently(r, 10*time.Second, time.Millisecond, func() error {
		if n++; n == 3 {
			return errors.New("pushed")
		}
		return nil
	})
	failed, msg := r.result()
	if !failed || !strings.Contains(msg, "pushed") || n != 3 {
		t.Errorf("Consistently of a condition that breaks: failed %v, message %q, %d calls", failed, msg, n)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("Consistently kept polling after the condition broke")
	}

	r = newRecorder(t)
	Consistently(r, 20*time.Millisecond, 0, func() error { return nil })
	if failed, msg := r.result(); !failed || !strings.Contains(msg, ErrBadInterval.Error()) {
		t.Errorf("Consistently with interval 0: failed %v, %q", failed, msg)
	}
}

func TestGolden(t *testing.T) {
	if Updating() {
		t.Skip("the test sets -update itself")
	}
	path := filepath.Join(t.TempDir(), "sub", "out.golden")

	r := newRecorder(t)
	Golden(r, path, []byte("a\n"))
	if failed, msg := r.result(); !failed || !strings.Contains(msg, "-update") {
		t.Errorf("Golden without a file: failed %v, %q", failed, msg)
	}

	*update = true
	r = newRecorder(t)
	Golden(r, path, []byte("a\n"))
	*update = false
	if failed, msg := r.result(); failed {
		t.Fatalf("Golden -update: %s", msg)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "a\n" {
		t.Fatalf("Golden -update wrote %q, %v", b, err)
	}

	r = newRecorder(t)
	Golden(r, path, []byte("a\n"))
	if failed, msg := r.result(); failed {
		t.Errorf("Golden of equal output: %s", msg)
	}
	r = newRecorder(t)
	Golden(r, path, []byte("b\n"))
	if failed, msg := r.result(); !failed || !strings.Contains(msg, "got:\nb\n") {
		t.Errorf("Golden of other output: failed %v, %q", failed, msg)
	}
}

func TestGoroutinesGrownSince(t *testing.T) {
	before := CountGoroutines()
	stop := make(chan struct{})
	var started sync.WaitGroup
	started.Add(3)
	for range 3 {
		go parkForTest(&started, stop)
	}
	started.Wait()
	after := CountGoroutines()
	close(stop)
	grown := after.GrownSince(before)
	if !strings.Contains(grown, "0 -> 3") || !strings.Contains(grown, "parkForTest") {
		t.Errorf("grown = %q, want the three parked goroutines named", grown)
	}
	// Other goroutines of the test binary come and go meanwhile, so only
	// the parked ones are counted.
	parked := 0
	for k, n := range after {
		if strings.Contains(k, "parkForTest") {
			parked += n - before[k]
		}
	}
	if parked != 3 {
		t.Errorf("%d more parked goroutines counted, want 3", parked)
	}
}

func parkForTest(started *sync.WaitGroup, stop chan struct{}) {
	started.Done()
	<-stop
}

func TestGoroutinesExcept(t *testing.T) {
	g := Goroutines{"net/http.(*persistConn).readLoop <- net/http.(*Transport).dialConn": 2, "app.run <- main.main": 1}
	if got := g.Except("(*Transport).dialConn"); got.Total() != 1 || got["app.run <- main.main"] != 1 {
		t.Errorf("Except = %v", got)
	}
}
