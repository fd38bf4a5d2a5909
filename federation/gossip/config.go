package gossip

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/federation"
)

// DefaultGossipPort is memberlist's usual port, used when BindAddr is empty.
const DefaultGossipPort = 7946

// MembershipOptions configure a Membership.
type MembershipOptions struct {
	// ReplicaID is this replica's memberlist node name; it must be unique
	// among the replicas.
	ReplicaID federation.ReplicaID
	// BindAddr is the ip:port gossip listens on, TCP and UDP. The host must
	// be an IP literal (empty means 0.0.0.0); port 0 picks a free port (see
	// LocalAddr). Empty means 0.0.0.0:7946.
	BindAddr string
	// AdvertiseAddr is the ip:port other replicas reach this one at, when
	// it differs from BindAddr (NAT, or binding 0.0.0.0). Optional.
	AdvertiseAddr string
	// Join lists seeds (host:port; a DNS name may resolve to several).
	// Run retries until one of them answers; an empty list starts a new
	// cluster. Seeds equal to this replica's own address are skipped.
	Join []string
	// Key is the 16, 24 or 32 byte AES key gossip is encrypted with; every
	// unencrypted or wrongly keyed message is refused. Nil leaves gossip in
	// plaintext, which is only for tests and trusted networks.
	Key []byte
	// PeerAddr is this replica's peer gRPC address, published to the
	// others in the node metadata.
	PeerAddr string
	// Version is this replica's build version, published in the node
	// metadata so that every replica can tell which build runs where.
	Version string
	// Config, if set, adjusts the memberlist configuration after the
	// defaults (see membershipConfig) are applied; for tests. It must not
	// replace Name, Delegate, Events, Logger or LogOutput: those are reset.
	Config func(*memberlist.Config)
	// LocalState returns this replica's Digest, sent to a peer on every
	// push/pull (at join, then every PushPullInterval). It is called on
	// memberlist's push/pull goroutines, possibly concurrently, and must
	// return quickly. Nil sends no digest.
	LocalState func() federation.Digest
	// MergeState receives the Digest a peer sent on push/pull. It is called
	// from one goroutine of Run, never concurrently and never from inside
	// memberlist; if a peer's digests arrive faster than MergeState returns,
	// only the latest one of each peer is delivered. Nil ignores digests.
	MergeState func(from federation.ReplicaID, d federation.Digest)
	// RejoinInterval is how often, while members that went away (left or
	// were declared dead) within RejoinWindow have not come back, Run joins
	// their last addresses and the seeds again. memberlist alone never
	// heals a partition: each side declares the other dead and gossips
	// only to the live, so two sides that can reach each other again stay
	// apart. The first join after the heal makes each side refute the
	// other's death, the next brings them together (TestPartitionHeals).
	// Zero: DefaultRejoinInterval (5 s); DefaultRejoinWindow (15 min).
	RejoinInterval, RejoinWindow time.Duration
	// Clock times the rejoins; default the real clock. (memberlist keeps
	// its own timers.)
	Clock clock.WithTicker

	Log     logr.Logger
	Metrics prometheus.Registerer
}

// membershipConfig is memberlist's LAN configuration tuned for a handful
// of hub replicas on one LAN, where the default failure detection (5–14 s
// measured; 6.2–6.8 s for three replicas on loopback) holds cluster
// ownership on a dead replica for too long. With these values a killed
// replica is declared dead in about 3 s (2.9–3.4 s measured, three
// replicas on loopback; TestMembershipDetectsCrash logs it).
func membershipConfig() *memberlist.Config {
	c := memberlist.DefaultLANConfig()
	// Probe every 500 ms instead of 1 s: the time until some replica first
	// probes a dead one, and the suspicion timeout (a multiple of this),
	// both halve. A probe is one small UDP packet per replica per interval.
	c.ProbeInterval = 500 * time.Millisecond
	// 200 ms instead of 500 ms, so a failed direct probe leaves 300 ms of
	// the interval for indirect and TCP probes. LAN round trips are far
	// below this; a replica that is itself slow is covered by memberlist's
	// awareness, which stretches its own timeouts.
	c.ProbeTimeout = 200 * time.Millisecond
	// Kept at the LAN default of 4, stated because it sets the detection
	// time: suspicion lasts 4 × ProbeInterval = 2 s for clusters under 10
	// replicas, giving a live but slow replica four probe rounds to refute.
	// With 3 replicas memberlist expects no confirmations (n-2 < mult-2)
	// and uses exactly this minimum; a lower value would wait for one
	// confirmation and could stretch to SuspicionMaxTimeoutMult times it.
	c.SuspicionMult = 4
	// Gossip every 500 ms (memberlist's WAN value) instead of 200 ms. It
	// bounds how long a suspect, dead or leave message waits for its next
	// round, but every probe (above, as often) piggybacks queued messages
	// too, GossipNodes (3) reaches every other replica of a small fleet in
	// one round, and a replica whose peer stream breaks is set aside at
	// once without waiting for gossip (hub/replication). Measured with
	// TestMembershipDetectsCrash, six runs each: 2.9–3.4 s at 100 ms,
	// 2.8–3.3 s at 200 ms, 2.5–3.5 s at 500 ms; no slower. Each tick wakes
	// the process (about 0.2 ms of CPU on a small VM): ten a second at
	// 100 ms were the largest share of an idle hub's CPU.
	c.GossipInterval = 500 * time.Millisecond
	// Push/pull every 5 s instead of 30 s: push/pull carries each replica's
	// Digest (anti-entropy for replicated cluster state) and repairs any
	// missed gossip. The state is a few members and a small digest.
	c.PushPullInterval = 5 * time.Second
	// 5 s instead of 10 s: bounds each join attempt to an unreachable seed
	// and every push/pull stream; on a LAN a healthy exchange takes
	// milliseconds.
	c.TCPTimeout = 5 * time.Second
	// Let a replica that crashed and came back with a new address under the
	// same name (a rescheduled pod) be taken back 5 s after it was declared
	// dead (then at its next push/pull: 5–9 s measured), instead of being
	// refused as a conflict until its dead entry is reaped
	// (GossipToTheDeadTime, 30 s). Only key holders can claim a name.
	c.DeadNodeReclaimTime = 5 * time.Second
	return c
}

// splitIPPort parses ip:port with an IP literal host (empty means
// 0.0.0.0). memberlist would bind every interface for a host name, so none
// is accepted.
func splitIPPort(addr string, allowZeroPort bool) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	if host == "" {
		host = "0.0.0.0"
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return "", 0, fmt.Errorf("host %q is not an IP address", host)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || (port == 0 && !allowZeroPort) {
		return "", 0, fmt.Errorf("invalid port %q", portStr)
	}
	return host, int(port), nil
}

// ParseGossipKey reads a gossip key: 16, 24 or 32 bytes (AES-128, -192,
// -256), raw or base64 text (standard alphabet, padded or not; surrounding
// whitespace ignored), as `openssl rand -base64 32` writes. Base64 is tried
// first: text that decodes to a valid length is read as base64 even if its
// own length would also fit a raw key. Raw keys are taken byte for byte.
func ParseGossipKey(b []byte) ([]byte, error) {
	text := bytes.TrimSpace(b)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
		if dec, err := enc.DecodeString(string(text)); err == nil && validKeyLen(len(dec)) {
			return dec, nil
		}
	}
	if validKeyLen(len(b)) {
		return bytes.Clone(b), nil
	}
	if len(text) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrInvalidGossipKey)
	}
	return nil, fmt.Errorf("%w: %d bytes, neither a 16, 24 or 32 byte key nor base64 text of one", ErrInvalidGossipKey, len(b))
}

func validKeyLen(n int) bool { return n == 16 || n == 24 || n == 32 }
