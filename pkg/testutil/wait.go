package testutil

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// ErrBadInterval is returned by Poll for an interval that is not positive.
var ErrBadInterval = errors.New("testutil: interval must be positive")

// Poll calls cond every interval until it returns nil, and returns nil; once
// timeout has passed (or ctx is done) it returns an error wrapping cond's
// last error, saying how long it waited and how often it tried. cond runs
// at least once. A timeout of 0 waits as long as ctx lives.
func Poll(ctx context.Context, timeout, interval time.Duration, cond func() error) error {
	if interval <= 0 {
		return fmt.Errorf("%w: %v", ErrBadInterval, interval)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	start := time.Now()
	t := time.NewTicker(interval)
	defer t.Stop()
	for attempt := 1; ; attempt++ {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("condition not met after %s (%d attempts): %w",
				time.Since(start).Round(time.Millisecond), attempt, err)
		case <-t.C:
		}
	}
}

// Eventually calls cond every interval until it returns nil; if it has not
// within timeout (or the test's context ends), it fails t with cond's last
// error. It must be called from the test's goroutine.
func Eventually(t testing.TB, timeout, interval time.Duration, cond func() error) {
	t.Helper()
	if err := Poll(t.Context(), timeout, interval, cond); err != nil {
		t.Fatalf("eventually: %v", err)
	}
}

// Consistently calls cond every interval for d (and once more at the end),
// and fails t at the first error: the negative check that nothing happens
// for d. cond runs at least twice. It must be called from the test's
// goroutine.
func Consistently(t testing.TB, d, interval time.Duration, cond func() error) {
	t.Helper()
	if err := holds(t.Context(), d, interval, cond); err != nil {
		t.Fatalf("consistently: %v", err)
	}
}

// holds is Consistently's loop: nil if cond returned nil on every call for
// d; an error from the first call that failed, or ctx's error if ctx ends
// first.
func holds(ctx context.Context, d, interval time.Duration, cond func() error) error {
	if interval <= 0 {
		return fmt.Errorf("%w: %v", ErrBadInterval, interval)
	}
	start := time.Now()
	end := time.NewTimer(d)
	defer end.Stop()
	t := time.NewTicker(interval)
	defer t.Stop()
	for attempt := 1; ; attempt++ {
		if err := cond(); err != nil {
			return fmt.Errorf("condition broke after %s (attempt %d): %w",
				time.Since(start).Round(time.Millisecond), attempt, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped after %s: %w", time.Since(start).Round(time.Millisecond), ctx.Err())
		case <-end.C:
			if err := cond(); err != nil {
				return fmt.Errorf("condition broke at the end of %s: %w", d, err)
			}
			return nil
		case <-t.C:
		}
	}
}

// Holds adapts a boolean condition: its error names what is awaited.
func Holds(what string, cond func() bool) func() error {
	return func() error {
		if !cond() {
			return fmt.Errorf("%s: not yet", what)
		}
		return nil
	}
}

// Named prefixes cond's error with what is awaited.
func Named(what string, cond func() error) func() error {
	return func() error {
		if err := cond(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
}
