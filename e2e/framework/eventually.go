package framework

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Eventually calls cond every interval until it returns nil, and fails
// with cond's last error once timeout has passed or ctx is done. cond runs
// at least once. Use it instead of sleeps: the wait is as short as the
// system allows and bounded.
func Eventually(ctx context.Context, timeout, interval time.Duration, cond func() error) error {
	if interval <= 0 {
		return errors.New("framework: Eventually needs a positive interval")
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
			return fmt.Errorf("framework: condition not met after %s (%d attempts): %w",
				time.Since(start).Round(time.Millisecond), attempt, err)
		case <-t.C:
		}
	}
}
