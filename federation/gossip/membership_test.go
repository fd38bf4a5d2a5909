package gossip

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshfed/meshfed/federation"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/testutil"
)

var lanBaseline = flag.Bool("membership.lan-baseline", false,
	"also measure crash detection with memberlist's untuned DefaultLANConfig (slow)")

var (
	gossipTestKey  = bytes.Repeat([]byte{0x42}, 32)
	gossipOtherKey = bytes.Repeat([]byte{0x17}, 32)
)

// waitGossip polls cond until it holds or timeout passes.
func waitGossip(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, timeout, 10*time.Millisecond, testutil.Holds(what, cond))
}

// gossipLogs collects log lines of one node; they are printed only if the
// test fails, since memberlist may log while a test is finishing.
type gossipLogs struct {
	mu    sync.Mutex
	lines []string
}

func (s *gossipLogs) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.lines = append(s.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 1})
}

func (s *gossipLogs) contains(substrs ...string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		if containsAll(l, substrs) {
			return true
		}
	}
	return false
}

func containsAll(s string, substrs []string) bool {
	for _, sub := range substrs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// gossipNode is one Membership under test, running until the test ends.
type gossipNode struct {
	*Membership
	reg    *prometheus.Registry
	logs   *gossipLogs
	cancel context.CancelFunc
	done   chan error
}

type gossipOpt func(*MembershipOptions)

func withGossipJoin(seeds ...string) gossipOpt {
	return func(o *MembershipOptions) { o.Join = seeds }
}

func withGossipKey(k []byte) gossipOpt { return func(o *MembershipOptions) { o.Key = k } }

func newGossipNode(t *testing.T, id string, opts ...gossipOpt) *gossipNode {
	t.Helper()
	n := &gossipNode{reg: prometheus.NewRegistry(), logs: &gossipLogs{}}
	o := MembershipOptions{
		ReplicaID: federation.ReplicaID(id),
		BindAddr:  "127.0.0.1:0",
		Key:       gossipTestKey,
		PeerAddr:  "peer-" + id + ":15012",
		Version:   "v0.1.0-" + id,
		Log:       n.logs.logger().WithName(id),
		Metrics:   n.reg,
	}
	for _, opt := range opts {
		opt(&o)
	}
	m, err := NewMembership(o)
	if err != nil {
		t.Fatalf("NewMembership(%s): %v", id, err)
	}
	n.Membership = m
	t.Cleanup(func() {
		n.stop(t)
		if t.Failed() {
			n.logs.mu.Lock()
			t.Logf("logs of %s:\n%s", id, strings.Join(n.logs.lines, "\n"))
			n.logs.mu.Unlock()
		}
	})
	return n
}

// start runs the node until stop or the end of the test.
func (n *gossipNode) start() *gossipNode {
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() { n.done <- n.Run(ctx) }()
	return n
}

// stop cancels Run (a graceful leave) and waits for it to return.
func (n *gossipNode) stop(t *testing.T) error {
	t.Helper()
	if n.cancel == nil {
		return n.close(false)
	}
	n.cancel()
	select {
	case err := <-n.done:
		n.done <- err // let a second stop see it too
		return err
	case <-time.After(2 * leaveTimeout):
		t.Errorf("%s: Run did not return after cancel", n.self.ID)
		return nil
	}
}

func (n *gossipNode) ids() []federation.ReplicaID {
	var out []federation.ReplicaID
	for _, m := range n.Members() {
		out = append(out, m.ID)
	}
	return out
}

func (n *gossipNode) sees(ids ...federation.ReplicaID) bool { return slices.Equal(n.ids(), ids) }

func (n *gossipNode) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return gossipMetric(t, n.reg, name, labels...)
}

func (n *gossipNode) rejected(t *testing.T, reason string) float64 {
	t.Helper()
	return n.metric(t, "meshfed_gossip_rejected_messages_total", "reason", reason)
}

// gossipMetric reads one counter or gauge; labels are name, value pairs.
func gossipMetric(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s%v not registered", name, labels)
	return 0
}

// cluster starts ids as one gossip cluster (each joining the first) and
// waits until everyone sees everyone.
func gossipCluster(t *testing.T, ids ...string) []*gossipNode {
	t.Helper()
	var nodes []*gossipNode
	var all []federation.ReplicaID
	for i, id := range ids {
		var opts []gossipOpt
		if i > 0 {
			opts = append(opts, withGossipJoin(nodes[0].LocalAddr()))
		}
		nodes = append(nodes, newGossipNode(t, id, opts...).start())
		all = append(all, federation.ReplicaID(id))
	}
	waitGossip(t, 10*time.Second, "all members to see each other", func() bool {
		for _, n := range nodes {
			if !n.sees(all...) {
				return false
			}
		}
		return true
	})
	return nodes
}

func TestMembershipMembersSeeEachOther(t *testing.T) {
	a := newGossipNode(t, "a").start()
	b := newGossipNode(t, "b", withGossipJoin(a.LocalAddr())).start()
	c := newGossipNode(t, "c", withGossipJoin(b.LocalAddr())).start()
	all := []*gossipNode{a, b, c}
	waitGossip(t, 10*time.Second, "a, b and c to see each other", func() bool {
		return a.sees("a", "b", "c") && b.sees("a", "b", "c") && c.sees("a", "b", "c")
	})

	want := []Member{a.Self(), b.Self(), c.Self()}
	for _, n := range all {
		if got := n.Members(); !slices.Equal(got, want) {
			t.Errorf("%s: Members() = %+v, want %+v", n.Self().ID, got, want)
		}
		if got, want := n.Self().PeerAddr, "peer-"+n.Self().ID.String()+":15012"; got != want {
			t.Errorf("%s: Self().PeerAddr = %q, want %q", n.Self().ID, got, want)
		}
		for _, m := range n.Members() {
			if m.Version != "v0.1.0-"+m.ID.String() {
				t.Errorf("%s sees %s at version %q, want what it published", n.Self().ID, m.ID, m.Version)
			}
		}
		if n.Self().GossipAddr != n.LocalAddr() {
			t.Errorf("%s: advertised %s, bound %s", n.Self().ID, n.Self().GossipAddr, n.LocalAddr())
		}
		if got := n.metric(t, "meshfed_gossip_members"); got != 3 {
			t.Errorf("%s: meshfed_gossip_members = %v, want 3", n.Self().ID, got)
		}
		if got := n.metric(t, "meshfed_gossip_member_events_total", "event", "join"); got != 3 {
			t.Errorf("%s: join events = %v, want 3", n.Self().ID, got)
		}
		if got := n.rejected(t, reasonDecrypt) + n.rejected(t, reasonMeta) + n.rejected(t, reasonState); got != 0 {
			t.Errorf("%s: %v rejected messages in a healthy cluster", n.Self().ID, got)
		}
		select {
		case <-n.Changed():
		default:
			t.Errorf("%s: Changed() did not fire", n.Self().ID)
		}
	}
}

func TestMembershipPushPullCarriesDigest(t *testing.T) {
	digest := func(seq uint64) federation.Digest {
		return federation.Digest{model.ClusterID("east"): federation.Version{Term: 3, Seq: seq, Owner: "a"}}
	}
	var local atomic.Pointer[federation.Digest]
	d1 := digest(1)
	local.Store(&d1)

	type received struct {
		from federation.ReplicaID
		d    federation.Digest
	}
	var mu sync.Mutex
	var got []received
	last := func() (received, int) {
		mu.Lock()
		defer mu.Unlock()
		if len(got) == 0 {
			return received{}, 0
		}
		return got[len(got)-1], len(got)
	}

	a := newGossipNode(t, "a", func(o *MembershipOptions) {
		o.LocalState = func() federation.Digest { return *local.Load() }
	}).start()
	b := newGossipNode(t, "b", withGossipJoin(a.LocalAddr()), func(o *MembershipOptions) {
		o.MergeState = func(from federation.ReplicaID, d federation.Digest) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, received{from, d})
		}
	}).start()

	// The join's push/pull already carries a's digest.
	waitGossip(t, 10*time.Second, "b to receive a's digest at join", func() bool {
		r, _ := last()
		return r.from == "a" && r.d[model.ClusterID("east")] == digest(1)[model.ClusterID("east")]
	})

	// A later change arrives with the periodic push/pull.
	changed := time.Now()
	d2 := digest(2)
	local.Store(&d2)
	waitGossip(t, 4*a.cfg.PushPullInterval, "b to receive a's new digest by push/pull", func() bool {
		r, _ := last()
		return r.from == "a" && r.d[model.ClusterID("east")] == digest(2)[model.ClusterID("east")]
	})
	t.Logf("new digest reached b %v after the change (PushPullInterval %v)", time.Since(changed).Round(time.Millisecond), a.cfg.PushPullInterval)
	for _, n := range []*gossipNode{a, b} {
		if r := n.rejected(t, reasonState); r != 0 {
			t.Errorf("%s: %v push/pull states rejected", n.Self().ID, r)
		}
	}
	_ = b
}

func TestMembershipRefusesWrongKey(t *testing.T) {
	nodes := gossipCluster(t, "a", "b")
	a, b := nodes[0], nodes[1]

	// A replica with another key: the seed cannot decrypt its join, and it
	// cannot decrypt the seed's answer. Both sides count it.
	c := newGossipNode(t, "c", withGossipKey(gossipOtherKey), withGossipJoin(a.LocalAddr())).start()
	waitGossip(t, 10*time.Second, "the wrong-key join to be refused on both sides", func() bool {
		return a.rejected(t, reasonDecrypt) >= 1 && c.rejected(t, reasonDecrypt) >= 1
	})

	// A replica with no key: the seed refuses its plaintext.
	d := newGossipNode(t, "d", withGossipKey(nil), withGossipJoin(a.LocalAddr())).start()
	waitGossip(t, 10*time.Second, "the plaintext join to be refused on both sides", func() bool {
		return a.rejected(t, reasonUnencrypted) >= 1 && d.rejected(t, reasonDecrypt) >= 1
	})

	// Both kept retrying in the meantime; neither got in.
	for _, n := range []*gossipNode{a, b} {
		if !n.sees("a", "b") {
			t.Errorf("%s sees %v, want only a and b", n.Self().ID, n.ids())
		}
	}
	if !c.sees("c") {
		t.Errorf("c sees %v, want only itself", c.ids())
	}
	if !d.sees("d") {
		t.Errorf("d sees %v, want only itself", d.ids())
	}
	if !a.logs.contains("no installed keys could decrypt") {
		t.Errorf("a did not log the refused join")
	}
	t.Logf("a rejected: decrypt=%v unencrypted=%v; c rejected: decrypt=%v",
		a.rejected(t, reasonDecrypt), a.rejected(t, reasonUnencrypted), c.rejected(t, reasonDecrypt))
}

func TestMembershipGracefulLeave(t *testing.T) {
	nodes := gossipCluster(t, "a", "b", "c")
	a, b, c := nodes[0], nodes[1], nodes[2]

	start := time.Now()
	if err := c.stop(t); err != nil {
		t.Fatalf("c.Run: %v", err)
	}
	stopped := time.Since(start)
	waitGossip(t, 10*time.Second, "a and b to drop c", func() bool {
		return a.sees("a", "b") && b.sees("a", "b")
	})
	t.Logf("c's Run returned after %v; a and b dropped c %v after the cancel",
		stopped.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	for _, n := range []*gossipNode{a, b} {
		// memberlist's events do not tell a leave from a death; but a death
		// is declared only when a suspicion timer (2 s) runs out, and the
		// leave has reached everyone long before.
		if n.logs.contains("Marking c as failed") {
			t.Errorf("%s declared c dead instead of seeing it leave", n.Self().ID)
		}
		if !n.logs.contains("member left", `"member"="c"`) {
			t.Errorf("%s did not log c leaving", n.Self().ID)
		}
		if got := n.metric(t, "meshfed_gossip_member_events_total", "event", "leave"); got != 1 {
			t.Errorf("%s: leave events = %v, want 1", n.Self().ID, got)
		}
		if got := n.metric(t, "meshfed_gossip_members"); got != 2 {
			t.Errorf("%s: meshfed_gossip_members = %v, want 2", n.Self().ID, got)
		}
	}
	if err := c.Run(context.Background()); !errors.Is(err, ErrMembershipRunning) {
		t.Errorf("second Run = %v, want ErrMembershipRunning", err)
	}
}

func TestMembershipJoinRetriesUntilSeedAnswers(t *testing.T) {
	// Find a free gossip address, then leave nobody listening on it.
	probe := newGossipNode(t, "seed")
	seedAddr := probe.LocalAddr()
	if err := probe.close(false); err != nil {
		t.Fatal(err)
	}

	b := newGossipNode(t, "b", withGossipJoin(seedAddr)).start()
	waitGossip(t, 10*time.Second, "b to fail a join attempt", func() bool {
		return b.logs.contains("joining gossip failed; retrying")
	})
	if !b.sees("b") {
		t.Fatalf("b sees %v before any seed exists", b.ids())
	}

	seed := newGossipNode(t, "seed", func(o *MembershipOptions) { o.BindAddr = seedAddr }).start()
	waitGossip(t, 30*time.Second, "b's retry to reach the seed", func() bool {
		return b.sees("b", "seed") && seed.sees("b", "seed")
	})

	// A replica still retrying stops promptly when its context ends.
	c := newGossipNode(t, "c", withGossipJoin(seedAddr), withGossipKey(gossipOtherKey)).start()
	waitGossip(t, 10*time.Second, "c to fail a join attempt", func() bool {
		return c.logs.contains("joining gossip failed; retrying")
	})
	start := time.Now()
	if err := c.stop(t); err != nil {
		t.Errorf("c.Run: %v", err)
	}
	t.Logf("Run returned %v after cancel during join retries", time.Since(start).Round(time.Millisecond))
}

// measureCrashDetection kills the last of three members without a leave, as
// SIGKILL would, and returns how long until both others dropped it.
func measureCrashDetection(t *testing.T, tweak func(*memberlist.Config)) time.Duration {
	t.Helper()
	a := newGossipNode(t, "a", func(o *MembershipOptions) { o.Config = tweak }).start()
	b := newGossipNode(t, "b", withGossipJoin(a.LocalAddr()), func(o *MembershipOptions) { o.Config = tweak }).start()
	c := newGossipNode(t, "c", withGossipJoin(a.LocalAddr()), func(o *MembershipOptions) { o.Config = tweak }).start()
	waitGossip(t, 10*time.Second, "a, b and c to see each other", func() bool {
		return a.sees("a", "b", "c") && b.sees("a", "b", "c") && c.sees("a", "b", "c")
	})

	start := time.Now()
	if err := c.close(false); err != nil {
		t.Fatalf("kill c: %v", err)
	}
	var aAt, bAt time.Duration
	waitGossip(t, 60*time.Second, "a and b to declare c dead", func() bool {
		if aAt == 0 && a.sees("a", "b") {
			aAt = time.Since(start)
		}
		if bAt == 0 && b.sees("a", "b") {
			bAt = time.Since(start)
		}
		return aAt > 0 && bAt > 0
	})
	if !a.logs.contains("Marking c as failed") && !b.logs.contains("Marking c as failed") {
		t.Errorf("neither a nor b declared c dead by suspicion timeout")
	}
	t.Logf("killed c declared dead by a after %v, by b after %v",
		aAt.Round(time.Millisecond), bAt.Round(time.Millisecond))
	return max(aAt, bAt)
}

func TestMembershipDetectsCrash(t *testing.T) {
	cfg := membershipConfig()
	// Expected: up to two probe rounds until a survivor probes c, the rest
	// of that interval for indirect probes, then SuspicionMult intervals.
	expect := 3*cfg.ProbeInterval + time.Duration(cfg.SuspicionMult)*cfg.ProbeInterval
	took := measureCrashDetection(t, nil)
	t.Logf("tuned config: crash detected in %v (nominal bound %v)", took.Round(time.Millisecond), expect)
}

func TestMembershipDetectsCrashLANBaseline(t *testing.T) {
	if !*lanBaseline {
		t.Skip("pass -membership.lan-baseline to measure memberlist's untuned LAN defaults")
	}
	lan := memberlist.DefaultLANConfig()
	took := measureCrashDetection(t, func(c *memberlist.Config) {
		c.ProbeInterval, c.ProbeTimeout = lan.ProbeInterval, lan.ProbeTimeout
		c.SuspicionMult, c.GossipInterval = lan.SuspicionMult, lan.GossipInterval
		c.PushPullInterval, c.TCPTimeout = lan.PushPullInterval, lan.TCPTimeout
		c.DeadNodeReclaimTime = lan.DeadNodeReclaimTime
	})
	t.Logf("LAN defaults: crash detected in %v", took.Round(time.Millisecond))
}

func TestMembershipReplicaRestartsUnderSameName(t *testing.T) {
	nodes := gossipCluster(t, "a", "b", "c")
	a, b, c := nodes[0], nodes[1], nodes[2]
	if err := c.close(false); err != nil {
		t.Fatal(err)
	}
	waitGossip(t, 30*time.Second, "a and b to declare c dead", func() bool {
		return a.sees("a", "b") && b.sees("a", "b")
	})

	// c comes back on another port (a rescheduled pod has a new address).
	start := time.Now()
	c2 := newGossipNode(t, "c", withGossipJoin(a.LocalAddr())).start()
	waitGossip(t, 30*time.Second, "a and b to take c back at its new address", func() bool {
		for _, n := range []*gossipNode{a, b} {
			ms := n.Members()
			i := slices.IndexFunc(ms, func(m Member) bool { return m.ID == "c" })
			if i < 0 || ms[i].GossipAddr != c2.Self().GossipAddr {
				return false
			}
		}
		return true
	})
	t.Logf("c at %s taken back %v after its restart (old address %s; DeadNodeReclaimTime %v)",
		c2.Self().GossipAddr, time.Since(start).Round(time.Millisecond), c.Self().GossipAddr, a.cfg.DeadNodeReclaimTime)
}

// garbageStateDelegate plays a replica whose push/pull state is garbage.
type garbageStateDelegate struct{ state []byte }

func (d garbageStateDelegate) NodeMeta(int) []byte                 { return []byte("not json") }
func (d garbageStateDelegate) NotifyMsg([]byte)                    {}
func (d garbageStateDelegate) GetBroadcasts(int, int) [][]byte     { return nil }
func (d garbageStateDelegate) LocalState(bool) []byte              { return d.state }
func (d garbageStateDelegate) MergeRemoteState(buf []byte, _ bool) {}

func TestMembershipRejectsMalformedState(t *testing.T) {
	var merged atomic.Int32
	a := newGossipNode(t, "a", func(o *MembershipOptions) {
		o.MergeState = func(federation.ReplicaID, federation.Digest) { merged.Add(1) }
	}).start()

	t.Run("delegate", func(t *testing.T) {
		d := gossipDelegate{a.Membership}
		bad := []string{
			`not json`,
			`{"v":1,"from":"x","digest":{}}trailing`,
			`{"v":1,"from":"x","digest":{"east":{"term":"three"}}}`,
			`{"v":1,"from":"x","digest":[]}`,
			`{"v":2,"from":"x","digest":{}}`,
			`{"v":1,"digest":{}}`,
			`{"v":1,"from":"x"`,
		}
		before := a.rejected(t, reasonState)
		for _, s := range bad {
			d.MergeRemoteState([]byte(s), false)
		}
		if got := a.rejected(t, reasonState) - before; got != float64(len(bad)) {
			t.Errorf("rejected %v states, want %d", got, len(bad))
		}
		if p := a.inbox.take(); len(p) != 0 {
			t.Errorf("malformed states queued digests: %+v", p)
		}
		// Empty state (a peer without LocalState) is no error.
		d.MergeRemoteState(nil, false)
		if got := a.rejected(t, reasonState) - before; got != float64(len(bad)) {
			t.Errorf("empty state counted as rejected")
		}
	})

	t.Run("peer", func(t *testing.T) {
		before := a.rejected(t, reasonState)
		cfg := memberlist.DefaultLocalConfig()
		cfg.Name = "raw"
		cfg.BindAddr, cfg.BindPort, cfg.AdvertisePort = "127.0.0.1", 0, 0
		cfg.SecretKey = gossipTestKey
		cfg.Delegate = garbageStateDelegate{state: []byte(`{"v":1,"from":`)}
		cfg.Logger = log.New(io.Discard, "", 0)
		raw, err := memberlist.Create(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Shutdown()
		if _, err := raw.Join([]string{a.LocalAddr()}); err != nil {
			t.Fatalf("raw join: %v", err)
		}
		waitGossip(t, 10*time.Second, "a to refuse raw's state", func() bool {
			return a.rejected(t, reasonState) > before
		})
		// The peer itself is a member (it holds the key), without a peer
		// address since its metadata is unreadable.
		waitGossip(t, 10*time.Second, "a to list raw", func() bool { return a.sees("a", "raw") })
		ms := a.Members()
		if ms[1].PeerAddr != "" {
			t.Errorf("raw's PeerAddr = %q, want empty", ms[1].PeerAddr)
		}
		if a.rejected(t, reasonMeta) < 1 {
			t.Errorf("raw's unreadable metadata was not counted")
		}
	})
	if n := merged.Load(); n != 0 {
		t.Errorf("MergeState called %d times with malformed state", n)
	}
}

// TestMembershipCountsRejectedTraffic sends refused traffic to a real
// memberlist, so the log texts the metric is parsed from are those of the
// memberlist version in go.mod.
func TestMembershipCountsRejectedTraffic(t *testing.T) {
	enc := newGossipNode(t, "enc")
	plain := newGossipNode(t, "plain", withGossipKey(nil))
	junk := append([]byte{1}, bytes.Repeat([]byte{0xAB}, 63)...) // encryption version 1, wrong key

	for _, tc := range []struct {
		name    string
		to      *gossipNode
		network string
		payload []byte
		reason  string
		logged  string // part of memberlist's log line
	}{
		{"udp wrong key", enc, "udp", junk, reasonDecrypt, "Decrypt packet failed: no installed keys could decrypt the message"},
		{"udp plaintext to encrypted", enc, "udp", []byte{7, 0, 1, 2}, reasonDecrypt, "Decrypt packet failed: unsupported encryption version 7"}, // 7: compound message
		{"udp truncated", enc, "udp", []byte{0, 1, 2, 3}, reasonDecrypt, "Decrypt packet failed: payload is too small to decrypt"},
		{"tcp wrong key", enc, "tcp", append([]byte{10, 0, 0, 0, byte(len(junk))}, junk...), reasonDecrypt, "failed to receive: no installed keys could decrypt the message"},
		{"tcp oversized", enc, "tcp", []byte{10, 0xFF, 0xFF, 0xFF, 0xFF}, reasonMalformed, "remote node state is larger than limit"},
		{"tcp plaintext to encrypted", enc, "tcp", []byte{6, 0x80}, reasonUnencrypted, "encryption is configured but remote state is not encrypted"},
		{"udp unknown type", plain, "udp", []byte{0xFF}, reasonMalformed, "msg type (255) not supported"},
		{"udp undecodable ping", plain, "udp", []byte{0, 0xC1}, reasonMalformed, "Failed to decode ping request"},
		{"tcp unknown type", plain, "tcp", []byte{0x7F}, reasonMalformed, "Received invalid msgType (127)"},
		{"tcp undecodable push/pull", plain, "tcp", []byte{6, 0xC1}, reasonMalformed, "Failed to read remote state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.to.rejected(t, tc.reason)
			conn, err := net.Dial(tc.network, tc.to.LocalAddr())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Write(tc.payload); err != nil {
				t.Fatal(err)
			}
			if tc.network == "tcp" {
				// Close the write side so a short read ends at once.
				_ = conn.(*net.TCPConn).CloseWrite()
			}
			defer conn.Close()
			waitGossip(t, 5*time.Second, fmt.Sprintf("a log line with %q and the message counted as %s", tc.logged, tc.reason), func() bool {
				return tc.to.logs.contains(tc.logged) && tc.to.rejected(t, tc.reason) > before
			})
		})
	}
}

func TestMembershipClassifyRejection(t *testing.T) {
	// Texts as memberlist v0.7.0 formats them (net.go, state.go,
	// security.go), and as Join returns them.
	for _, tc := range []struct {
		line   string
		reason string // "" means not a rejection
	}{
		{"Decrypt packet failed: no installed keys could decrypt the message from=127.0.0.1:1", reasonDecrypt},
		{"failed to receive: no installed keys could decrypt the message from=127.0.0.1:1", reasonDecrypt},
		{"Decrypt packet failed: payload is too small to decrypt: 4 from=127.0.0.1:1", reasonDecrypt},
		{"failed to receive: remote node state is larger than limit (4294967295) from=127.0.0.1:1", reasonMalformed},
		{"failed to receive: remote state is encrypted and encryption is not configured from=127.0.0.1:1", reasonDecrypt},
		{"failed to receive: encryption is configured but remote state is not encrypted from=127.0.0.1:1", reasonUnencrypted},
		{"1 error occurred:\n\t* failed to join 127.0.0.1:7946: no installed keys could decrypt the message\n\n", reasonDecrypt},
		{"discarding packet with unacceptable label \"x\": from=127.0.0.1:1", reasonLabel},
		{"Got invalid checksum for UDP packet: 1, 2", reasonMalformed},
		{"Failed to decode alive message: EOF from=127.0.0.1:1", reasonMalformed},
		{"Message type (3) not supported from=127.0.0.1:1 (packet handler)", reasonMalformed},
		{"UDP packet too short (0 bytes) from=127.0.0.1:1", reasonMalformed},
		{"Conflicting address for c. Mine: 127.0.0.1:1 Theirs: 127.0.0.1:2 Old state: 2", reasonConflict},
		{"failed to receive: read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout from=127.0.0.1:2", reasonOther},
		{"Failed to send UDP ping: connection refused", ""},
		{"Push/Pull with b failed: dial tcp: connection refused", ""},
		{"Suspect c has failed, no acks received", ""},
	} {
		got, ok := classifyRejection(tc.line)
		if got != tc.reason || ok != (tc.reason != "") {
			t.Errorf("classifyRejection(%q) = %q, %v; want %q", tc.line, got, ok, tc.reason)
		}
	}
}

func TestMembershipLogWriter(t *testing.T) {
	var sink gossipLogs
	var rejects []string
	w := &logWriter{log: sink.logger(), reject: func(r string) { rejects = append(rejects, r) }, closed: new(atomic.Bool)}
	lg := log.New(w, "", 0) // as memberlist gets it
	lg.Printf("[DEBUG] memberlist: Stream connection from=127.0.0.1:1")
	lg.Printf("[INFO] memberlist: Marking c as failed, suspect timeout reached (0 peer confirmations)")
	lg.Printf("[WARN] memberlist: Refuting a suspect message (from: b)")
	lg.Printf("[ERR] memberlist: Decrypt packet failed: no installed keys could decrypt the message from=127.0.0.1:1")
	lg.Printf("Err: Could not set the deadline: boom")

	if sink.contains("Stream connection") {
		t.Errorf("DEBUG line was logged")
	}
	for _, want := range [][]string{
		{`"level"=1`, `"msg"="Marking c as failed`},
		{`"level"=0`, `"msg"="Refuting a suspect message (from: b)"`},
		{`"msg"="Decrypt packet failed: no installed keys`, `"error"=null`},
		{`"msg"="Err: Could not set the deadline: boom"`, `"error"=null`},
	} {
		if !sink.contains(want...) {
			t.Errorf("no log line with %q in:\n%s", want, strings.Join(sink.lines, "\n"))
		}
	}
	if !slices.Equal(rejects, []string{reasonDecrypt}) {
		t.Errorf("rejects = %v, want [decrypt]", rejects)
	}
}

func TestNewMembershipRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts MembershipOptions
		want error
	}{
		{"no id", MembershipOptions{BindAddr: "127.0.0.1:0"}, ErrInvalidMembershipOptions},
		{"host name", MembershipOptions{ReplicaID: "a", BindAddr: "localhost:0"}, ErrInvalidMembershipOptions},
		{"no port", MembershipOptions{ReplicaID: "a", BindAddr: "127.0.0.1"}, ErrInvalidMembershipOptions},
		{"advertise port 0", MembershipOptions{ReplicaID: "a", BindAddr: "127.0.0.1:0", AdvertiseAddr: "10.0.0.1:0"}, ErrInvalidMembershipOptions},
		{"short key", MembershipOptions{ReplicaID: "a", BindAddr: "127.0.0.1:0", Key: []byte("short")}, ErrInvalidGossipKey},
		{"long peer addr", MembershipOptions{ReplicaID: "a", BindAddr: "127.0.0.1:0", PeerAddr: strings.Repeat("x", 600)}, ErrInvalidMembershipOptions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMembership(tc.opts)
			if !errors.Is(err, tc.want) || m != nil {
				t.Errorf("NewMembership = %v, %v; want nil, %v", m, err, tc.want)
			}
		})
	}

	t.Run("metrics already registered", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		first := newGossipNode(t, "a", func(o *MembershipOptions) { o.Metrics = reg })
		m, err := NewMembership(MembershipOptions{ReplicaID: "b", BindAddr: "127.0.0.1:0", Metrics: reg})
		if err == nil || m != nil {
			t.Fatalf("NewMembership with a used registry = %v, %v; want an error", m, err)
		}
		// The failed attempt released its port and left the registry as it was.
		_ = first
		if got := gossipMetric(t, reg, "meshfed_gossip_members"); got != 1 {
			t.Errorf("meshfed_gossip_members = %v, want 1 (the first membership)", got)
		}
	})
}

func TestParseGossipKey(t *testing.T) {
	raw16 := []byte("0123456789abcdef") // also 16 chars of base64 (12 bytes): raw wins
	raw32 := bytes.Repeat([]byte{0xFE}, 32)
	raw24ws := append([]byte{' '}, bytes.Repeat([]byte{0x0A}, 23)...) // whitespace bytes are key bytes
	for _, tc := range []struct {
		name string
		in   []byte
		want []byte // nil means an error
	}{
		{"raw 16", raw16, raw16},
		{"raw 32 binary", raw32, raw32},
		{"raw 24 with whitespace bytes", raw24ws, raw24ws},
		{"base64 32", []byte(base64.StdEncoding.EncodeToString(raw32)), raw32},
		{"base64 32 with newline", []byte(base64.StdEncoding.EncodeToString(raw32) + "\n"), raw32},
		{"base64 16 spaced", []byte("  " + base64.StdEncoding.EncodeToString(raw16) + " \r\n"), raw16},
		{"base64 24 unpadded", []byte(base64.RawStdEncoding.EncodeToString(raw32[:24])), raw32[:24]},
		{"empty", nil, nil},
		{"whitespace", []byte(" \n\t"), nil},
		{"raw 15", raw16[:15], nil},
		{"raw 33", append(bytes.Clone(raw32), 1), nil},
		{"base64 of 20 bytes", []byte(base64.StdEncoding.EncodeToString(raw32[:20])), nil},
		{"not base64", []byte("this is not a key at all!"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseGossipKey(tc.in)
			if tc.want == nil {
				if !errors.Is(err, ErrInvalidGossipKey) {
					t.Errorf("ParseGossipKey(%q) = %x, %v; want ErrInvalidGossipKey", tc.in, got, err)
				}
				if err != nil && bytes.Contains([]byte(err.Error()), bytes.TrimSpace(tc.in)) && len(bytes.TrimSpace(tc.in)) > 0 {
					t.Errorf("error %q repeats the key material", err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Errorf("ParseGossipKey(%q) = %x, %v; want %x", tc.in, got, err, tc.want)
			}
			if err := memberlist.ValidateKey(got); err != nil {
				t.Errorf("memberlist refuses the parsed key: %v", err)
			}
		})
	}
}

func ExampleParseGossipKey() {
	key, err := ParseGossipKey([]byte("QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=\n"))
	fmt.Println(len(key), err)
	// Output: 32 <nil>
}
