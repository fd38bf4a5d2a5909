package remotes

import (
	"testing"
	"time"
)

func TestEffectiveState(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		state  State
		expiry time.Time
		want   State
	}{
		{StateSynced, time.Time{}, StateSynced},
		{StateSynced, now.Add(48 * time.Hour), StateSynced},
		{StateSynced, now.Add(time.Hour), StateCredentialExpiring},
		{StateReplicated, now.Add(-time.Hour), StateCredentialExpiring},
		{StateUnreachable, now.Add(time.Hour), StateUnreachable}, // the worse news wins
	} {
		c := ClusterStatus{State: tc.state, CredentialExpiry: tc.expiry}
		if got := c.Effective(now); got != tc.want {
			t.Errorf("%s expiring %v: got %s, want %s", tc.state, tc.expiry, got, tc.want)
		}
	}
}
