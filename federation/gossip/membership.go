package gossip

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/federation"
)

// Errors of membership setup.
var (
	// ErrInvalidGossipKey is returned by ParseGossipKey and NewMembership
	// for a key that is not 16, 24 or 32 bytes (raw or base64).
	ErrInvalidGossipKey = errors.New("gossip: invalid gossip key")
	// ErrInvalidMembershipOptions is returned by NewMembership for options
	// it cannot use.
	ErrInvalidMembershipOptions = errors.New("gossip: invalid membership options")
	// ErrMembershipRunning is returned by a second call of Membership.Run.
	ErrMembershipRunning = errors.New("gossip: membership already running")
)

// DefaultGossipPort is memberlist's usual port, used when BindAddr is empty.
const DefaultGossipPort = 7946

const (
	// leaveTimeout bounds the wait for the leave broadcast on shutdown; the
	// broadcast goes out on the next gossip tick (100 ms), so this is only
	// reached when no peer is reachable any more.
	leaveTimeout = 3 * time.Second
	// joinBackoffMin and joinBackoffMax bound the wait between join
	// attempts. Each attempt is itself bounded by Config.TCPTimeout per
	// seed address.
	joinBackoffMin = 500 * time.Millisecond
	joinBackoffMax = 15 * time.Second
	// DefaultRejoinInterval and DefaultRejoinWindow: see
	// MembershipOptions.RejoinInterval.
	DefaultRejoinInterval = 5 * time.Second
	DefaultRejoinWindow   = 15 * time.Minute
	// metaVersion and stateVersion version the JSON that this replica puts
	// in its node metadata and its push/pull state. Add fields freely; bump
	// the version only for changes an older replica would misread.
	metaVersion  = 1
	stateVersion = 1
)

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

// Member is a live hub replica as gossip sees it.
type Member struct {
	ID federation.ReplicaID
	// PeerAddr is the member's peer gRPC address from its node metadata;
	// empty if it published none or metadata this replica cannot read.
	PeerAddr string
	// GossipAddr is the ip:port the member gossips on.
	GossipAddr string
	// Version is the member's build version from its node metadata; empty
	// if it published none.
	Version string
}

// Membership tracks the live hub replicas with hashicorp/memberlist:
// failure detection by probing, encrypted gossip, graceful leave, and
// push/pull anti-entropy that carries each replica's Digest.
type Membership struct {
	opts     MembershipOptions
	log      logr.Logger
	metrics  *membershipMetrics
	meta     []byte // this replica's node metadata, fixed at construction
	bindHost string
	cfg      *memberlist.Config // memberlist sets cfg.BindPort when port 0 was asked
	list     *memberlist.Memberlist
	self     Member

	changed chan struct{} // capacity 1; coalesces membership changes

	mu      sync.Mutex
	members map[federation.ReplicaID]Member // guarded by mu; live members, self included
	// departed are members that went away, by ID: their last gossip
	// address and when; dropped when they come back or RejoinWindow ends.
	departed map[federation.ReplicaID]departure // guarded by mu

	inbox digestInbox

	running   atomic.Bool
	closeOnce sync.Once
	closeErr  error       // set inside closeOnce
	shutdown  atomic.Bool // set once memberlist is shutting down
}

// NewMembership validates opts and starts memberlist: it listens and
// answers peers that join it, but joins nobody until Run.
func NewMembership(opts MembershipOptions) (*Membership, error) {
	if opts.ReplicaID == "" {
		return nil, fmt.Errorf("%w: empty ReplicaID", ErrInvalidMembershipOptions)
	}
	if opts.BindAddr == "" {
		opts.BindAddr = net.JoinHostPort("0.0.0.0", strconv.Itoa(DefaultGossipPort))
	}
	bindHost, bindPort, err := splitIPPort(opts.BindAddr, true)
	if err != nil {
		return nil, fmt.Errorf("%w: BindAddr: %w", ErrInvalidMembershipOptions, err)
	}
	if opts.Key != nil {
		if err := memberlist.ValidateKey(opts.Key); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidGossipKey, err)
		}
	}
	meta, err := json.Marshal(nodeMeta{Peer: opts.PeerAddr, Build: opts.Version, V: metaVersion})
	if err != nil {
		return nil, fmt.Errorf("gossip: encode node metadata: %w", err)
	}
	if len(meta) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: PeerAddr and Version too long for node metadata (%d > %d bytes)",
			ErrInvalidMembershipOptions, len(meta), memberlist.MetaMaxSize)
	}
	if opts.RejoinInterval <= 0 {
		opts.RejoinInterval = DefaultRejoinInterval
	}
	if opts.RejoinWindow <= 0 {
		opts.RejoinWindow = DefaultRejoinWindow
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	metrics := newMembershipMetrics()
	m := &Membership{
		opts:     opts,
		log:      opts.Log,
		metrics:  metrics,
		meta:     meta,
		bindHost: bindHost,
		changed:  make(chan struct{}, 1),
		members:  map[federation.ReplicaID]Member{},
		departed: map[federation.ReplicaID]departure{},
		inbox:    newDigestInbox(),
	}

	cfg := membershipConfig()
	cfg.BindAddr, cfg.BindPort = bindHost, bindPort
	cfg.AdvertisePort = bindPort
	if opts.AdvertiseAddr != "" {
		cfg.AdvertiseAddr, cfg.AdvertisePort, err = splitIPPort(opts.AdvertiseAddr, false)
		if err != nil {
			return nil, fmt.Errorf("%w: AdvertiseAddr: %w", ErrInvalidMembershipOptions, err)
		}
	}
	if opts.Key != nil {
		cfg.SecretKey = bytes.Clone(opts.Key)
		cfg.GossipVerifyIncoming = true
		cfg.GossipVerifyOutgoing = true
	}
	if opts.Config != nil {
		opts.Config(cfg)
	}
	// What Membership itself relies on, whatever the hook did.
	cfg.Name = string(opts.ReplicaID)
	cfg.Delegate = gossipDelegate{m}
	cfg.Events = eventDelegate{m}
	cfg.LogOutput = nil
	cfg.Logger = log.New(&logWriter{log: opts.Log.WithName("memberlist"), reject: metrics.reject, closed: &m.shutdown}, "", 0)
	m.cfg = cfg

	if opts.Key == nil {
		m.log.Info("gossip is NOT encrypted: anyone who can reach the gossip port can join; set a gossip key")
	}
	list, err := memberlist.Create(cfg)
	if err != nil {
		return nil, fmt.Errorf("gossip: start memberlist on %s: %w", opts.BindAddr, err)
	}
	if err := metrics.register(opts.Metrics); err != nil {
		_ = list.Shutdown()
		return nil, err
	}
	m.list = list
	local := list.LocalNode()
	m.self = Member{ID: opts.ReplicaID, PeerAddr: opts.PeerAddr, GossipAddr: local.Address(), Version: opts.Version}
	return m, nil
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
	// Gossip every 100 ms instead of 200 ms: suspect, dead and leave
	// messages reach the other replicas in one or two rounds. Few replicas,
	// so the extra packets are negligible.
	c.GossipInterval = 100 * time.Millisecond
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

// Run joins the seeds, retrying with backoff and jitter until one answers
// or ctx ends, delivers peers' digests to MergeState, and blocks until ctx
// ends. Then it leaves gracefully, so the others drop this replica at once
// rather than after failure detection, and shuts memberlist down. It
// returns nil after a normal shutdown. Run may be called once.
func (m *Membership) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return ErrMembershipRunning
	}
	m.log.Info("gossip started", "addr", m.LocalAddr(), "advertise", m.self.GossipAddr,
		"encrypted", m.opts.Key != nil, "seeds", m.opts.Join)
	var wg sync.WaitGroup
	wg.Go(func() { m.deliverDigests(ctx) })
	wg.Go(func() { m.joinLoop(ctx) })
	wg.Go(func() { m.rejoinLoop(ctx) })
	<-ctx.Done()
	wg.Wait()
	return m.close(true)
}

// Members returns the live members, this replica included, sorted by ID.
// Suspected members are still live; they are dropped when declared dead or
// when they leave.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.SortedFunc(maps.Values(m.members), func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
}

// Changed receives after members join, leave or change their metadata.
// Notifications coalesce: read Members after each.
func (m *Membership) Changed() <-chan struct{} { return m.changed }

// Self returns this replica as the others see it.
func (m *Membership) Self() Member { return m.self }

// LocalAddr returns the address gossip is bound to, with the port actually
// picked when BindAddr asked for port 0. Peers should be given
// Self().GossipAddr, which differs when binding 0.0.0.0.
func (m *Membership) LocalAddr() string {
	return net.JoinHostPort(m.bindHost, strconv.Itoa(m.cfg.BindPort))
}

// close stops memberlist once: after a graceful leave, or abruptly (as a
// crash would, for tests).
func (m *Membership) close(leave bool) error {
	m.closeOnce.Do(func() {
		if leave {
			if err := m.list.Leave(leaveTimeout); err != nil {
				m.log.Error(err, "leaving gossip; peers will detect the failure instead")
			} else {
				m.log.Info("left gossip")
			}
		}
		// memberlist's timers may fire once more while it shuts down and
		// report the closed socket; those lines are noise, and would reach
		// a logger whose owner (a test) may be gone.
		m.shutdown.Store(true)
		if err := m.list.Shutdown(); err != nil {
			m.closeErr = fmt.Errorf("gossip: shut down memberlist: %w", err)
		}
	})
	return m.closeErr
}

// joinLoop joins the seeds, retrying until one answers or ctx ends.
func (m *Membership) joinLoop(ctx context.Context) {
	seeds := make([]string, 0, len(m.opts.Join))
	for _, s := range m.opts.Join {
		if s != m.LocalAddr() && s != m.self.GossipAddr {
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		m.log.Info("no seeds to join; starting a new gossip cluster")
		return
	}
	backoff := joinBackoffMin
	for attempt := 1; ctx.Err() == nil; attempt++ {
		n, err := m.list.Join(seeds)
		if err == nil && n > 0 {
			m.log.Info("joined gossip", "contacted", n, "attempt", attempt, "members", len(m.Members()))
			return
		}
		if err == nil {
			err = errors.New("no seed answered")
		}
		if reason, ok := classifyRejection(err.Error()); ok {
			// A seed refused us (or we it): this side of a key mismatch.
			m.metrics.reject(reason)
		}
		wait := jitter(backoff)
		m.log.Error(err, "joining gossip failed; retrying", "seeds", seeds, "attempt", attempt, "retryIn", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, joinBackoffMax)
	}
}

// departure is a member that went away: its last gossip address, and when.
type departure struct {
	addr string
	at   time.Time
}

// rejoinLoop joins, every RejoinInterval while some member that went away
// within RejoinWindow has not come back, those members' last addresses and
// the seeds (see MembershipOptions.RejoinInterval).
func (m *Membership) rejoinLoop(ctx context.Context) {
	t := m.opts.Clock.NewTicker(m.opts.RejoinInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		targets, missing := m.rejoinTargets()
		if len(missing) == 0 {
			continue
		}
		n, err := m.list.Join(targets)
		result := "contacted"
		if n == 0 {
			result = "failed"
		}
		m.metrics.rejoins.WithLabelValues(result).Inc()
		m.log.V(1).Info("rejoining members that went away", "missing", missing, "targets", targets, "contacted", n, "error", errString(err))
	}
}

// rejoinTargets returns the addresses to join (the departed members' and
// the seeds, not this replica's) and the IDs of the departed members still
// within RejoinWindow; older ones are forgotten.
func (m *Membership) rejoinTargets() (targets []string, missing []federation.ReplicaID) {
	now := m.opts.Clock.Now()
	m.mu.Lock()
	for id, d := range m.departed {
		if now.Sub(d.at) > m.opts.RejoinWindow {
			delete(m.departed, id)
			continue
		}
		missing = append(missing, id)
		targets = append(targets, d.addr)
	}
	m.mu.Unlock()
	for _, s := range m.opts.Join {
		if s != m.LocalAddr() && s != m.self.GossipAddr && !slices.Contains(targets, s) {
			targets = append(targets, s)
		}
	}
	slices.Sort(missing)
	return targets, missing
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// jitter spreads d over [d/2, 3d/2) so replicas that start together do not
// retry in lockstep.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}

// deliverDigests hands peers' digests to MergeState until ctx ends.
func (m *Membership) deliverDigests(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.inbox.ready:
		}
		for _, in := range m.inbox.take() {
			m.opts.MergeState(in.from, in.digest)
		}
	}
}

// notifyChanged wakes a reader of Changed without blocking.
func (m *Membership) notifyChanged() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// setMember records a join or update and reports the live count.
func (m *Membership) setMember(mem Member) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.members[mem.ID] = mem
	delete(m.departed, mem.ID)
	return len(m.members)
}

// removeMember drops a member that left or died, remembering its address
// for the rejoins.
func (m *Membership) removeMember(id federation.ReplicaID, addr string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.members, id)
	if id != m.opts.ReplicaID {
		m.departed[id] = departure{addr: addr, at: m.opts.Clock.Now()}
	}
	return len(m.members)
}

// memberFromNode reads a memberlist node; unreadable metadata leaves
// PeerAddr empty and is counted.
func (m *Membership) memberFromNode(n *memberlist.Node) Member {
	mem := Member{ID: federation.ReplicaID(n.Name), GossipAddr: n.Address()}
	meta, err := decodeNodeMeta(n.Meta)
	if err != nil {
		m.metrics.reject(reasonMeta)
		m.log.Error(err, "member published unreadable node metadata; it has no peer address", "member", n.Name, "bytes", len(n.Meta))
		return mem
	}
	mem.PeerAddr = meta.Peer
	mem.Version = meta.Build
	return mem
}

// nodeMeta is the JSON in a member's node metadata, well below
// memberlist.MetaMaxSize (512 bytes).
type nodeMeta struct {
	Peer string `json:"peer"`
	// Build is the replica's version; replicas older than it publish none.
	Build string `json:"build,omitempty"`
	V     int    `json:"v"`
}

// decodeNodeMeta parses a member's node metadata.
func decodeNodeMeta(b []byte) (nodeMeta, error) {
	var meta nodeMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return nodeMeta{}, err
	}
	if meta.V < 1 {
		return nodeMeta{}, fmt.Errorf("node metadata version %d", meta.V)
	}
	return meta, nil
}

// gossipState is the JSON a replica sends on push/pull. memberlist does
// not say who sent push/pull state, so the sender names itself.
type gossipState struct {
	V      int                  `json:"v"`
	From   federation.ReplicaID `json:"from"`
	Digest federation.Digest    `json:"digest"`
}

// decodeGossipState parses and checks a peer's push/pull state.
func decodeGossipState(buf []byte) (gossipState, error) {
	var s gossipState
	if err := json.Unmarshal(buf, &s); err != nil {
		return gossipState{}, err
	}
	if s.V != stateVersion {
		return gossipState{}, fmt.Errorf("unsupported state version %d", s.V)
	}
	if s.From == "" {
		return gossipState{}, errors.New("state names no sender")
	}
	return s, nil
}

// gossipDelegate is memberlist's Delegate. memberlist calls it from its
// packet and stream goroutines, concurrently; no method blocks.
type gossipDelegate struct{ m *Membership }

// NodeMeta returns the metadata fixed at construction (checked against
// memberlist.MetaMaxSize there).
func (d gossipDelegate) NodeMeta(limit int) []byte {
	if len(d.m.meta) > limit {
		return nil
	}
	return d.m.meta
}

// NotifyMsg counts user messages: replicas send none, so one is a
// misbehaving peer.
func (d gossipDelegate) NotifyMsg([]byte) { d.m.metrics.reject(reasonUnexpected) }

// GetBroadcasts returns nothing: state moves over the peer gRPC stream.
func (d gossipDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState encodes this replica's Digest for push/pull.
func (d gossipDelegate) LocalState(join bool) []byte {
	if d.m.opts.LocalState == nil {
		return nil
	}
	buf, err := json.Marshal(gossipState{V: stateVersion, From: d.m.opts.ReplicaID, Digest: d.m.opts.LocalState()})
	if err != nil {
		d.m.log.Error(err, "encoding push/pull state")
		return nil
	}
	return buf
}

// MergeRemoteState queues a peer's Digest for MergeState. Malformed state
// is counted, logged and dropped; nothing changes.
func (d gossipDelegate) MergeRemoteState(buf []byte, join bool) {
	if len(buf) == 0 {
		return
	}
	s, err := decodeGossipState(buf)
	if err != nil {
		d.m.metrics.reject(reasonState)
		d.m.log.Error(err, "refusing malformed push/pull state", "bytes", len(buf), "join", join)
		return
	}
	if s.From == d.m.opts.ReplicaID || d.m.opts.MergeState == nil {
		return
	}
	d.m.inbox.put(s.From, s.Digest)
}

// eventDelegate is memberlist's EventDelegate. memberlist calls it one at a
// time, while holding its node lock: it must neither block nor call back
// into memberlist.
type eventDelegate struct{ m *Membership }

func (d eventDelegate) NotifyJoin(n *memberlist.Node) {
	mem := d.m.memberFromNode(n)
	d.m.metrics.members.Set(float64(d.m.setMember(mem)))
	d.m.metrics.events.WithLabelValues("join").Inc()
	d.m.logEvent("member joined", "member", mem.ID, "gossip", mem.GossipAddr, "peer", mem.PeerAddr)
	d.m.notifyChanged()
}

func (d eventDelegate) NotifyLeave(n *memberlist.Node) {
	d.m.metrics.members.Set(float64(d.m.removeMember(federation.ReplicaID(n.Name), n.Address())))
	d.m.metrics.events.WithLabelValues("leave").Inc()
	// A graceful leave and a death look the same here: memberlist v0.7.0
	// tracks left versus dead in its own nodeState.State and leaves the
	// Node.State it passes to delegates unset.
	d.m.logEvent("member left", "member", n.Name, "gossip", n.Address())
	d.m.notifyChanged()
}

func (d eventDelegate) NotifyUpdate(n *memberlist.Node) {
	mem := d.m.memberFromNode(n)
	d.m.metrics.members.Set(float64(d.m.setMember(mem)))
	d.m.metrics.events.WithLabelValues("update").Inc()
	d.m.logEvent("member updated", "member", mem.ID, "gossip", mem.GossipAddr, "peer", mem.PeerAddr)
	d.m.notifyChanged()
}

// logEvent logs a membership event unless memberlist is shutting down:
// its suspicion timers may still declare a member dead after Shutdown
// returns, when whoever owns the logger (a test, say) has gone.
func (m *Membership) logEvent(msg string, kv ...any) {
	if m.shutdown.Load() {
		return
	}
	m.log.Info(msg, kv...)
}

// digestInbox holds the latest undelivered Digest of each peer.
type digestInbox struct {
	ready chan struct{} // capacity 1; signals pending digests

	mu      sync.Mutex
	pending map[federation.ReplicaID]federation.Digest // guarded by mu
}

type inboxEntry struct {
	from   federation.ReplicaID
	digest federation.Digest
}

func newDigestInbox() digestInbox {
	return digestInbox{ready: make(chan struct{}, 1), pending: map[federation.ReplicaID]federation.Digest{}}
}

func (b *digestInbox) put(from federation.ReplicaID, d federation.Digest) {
	b.mu.Lock()
	b.pending[from] = d
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// take empties the inbox, sorted by sender.
func (b *digestInbox) take() []inboxEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]inboxEntry, 0, len(b.pending))
	for _, from := range slices.Sorted(maps.Keys(b.pending)) {
		out = append(out, inboxEntry{from, b.pending[from]})
	}
	clear(b.pending)
	return out
}

// Reasons of meshfed_gossip_rejected_messages_total.
const (
	reasonDecrypt     = "decrypt"     // could not decrypt: wrong key, or encrypted while we have none
	reasonUnencrypted = "unencrypted" // plaintext while encryption is required
	reasonLabel       = "label"       // memberlist label mismatch
	reasonMalformed   = "malformed"   // undecodable message, bad checksum, unknown type
	reasonConflict    = "conflict"    // a node name claimed from a second address
	reasonState       = "state"       // push/pull state (our JSON) unreadable
	reasonMeta        = "meta"        // node metadata (our JSON) unreadable
	reasonUnexpected  = "unexpected"  // a user message; replicas send none
	reasonOther       = "other"       // a stream refused for another reason
)

var rejectionReasons = []string{
	reasonDecrypt, reasonUnencrypted, reasonLabel, reasonMalformed, reasonConflict,
	reasonState, reasonMeta, reasonUnexpected, reasonOther,
}

// rejectionPatterns map memberlist v0.7.0 log and error texts (lower-cased)
// to a reason; the first match wins. membership_test.go provokes most of
// them against a real memberlist, so an upgrade that rewords them fails
// there rather than silently counting nothing.
var rejectionPatterns = []struct{ substr, reason string }{
	// net.go ingestPacket / handleConn.
	{"unacceptable label", reasonLabel},
	{"unexpected double packet label header", reasonLabel},
	{"unexpected double stream label header", reasonLabel},
	// readStream, plaintext stream while GossipVerifyIncoming.
	{"encryption is configured but remote state is not encrypted", reasonUnencrypted},
	// decryptPayload (security.go), via "Decrypt packet failed: %v" for
	// UDP and "failed to receive: %s" for streams.
	{"decrypt packet failed", reasonDecrypt},
	{"no installed keys could decrypt", reasonDecrypt},
	{"unsupported encryption version", reasonDecrypt},
	{"payload is too small to decrypt", reasonDecrypt},
	{"cannot decrypt empty payload", reasonDecrypt},
	{"remote state is encrypted and encryption is not configured", reasonDecrypt},
	// Undecodable content from a peer that passed decryption (or with
	// encryption off).
	{"got invalid checksum", reasonMalformed},
	{"failed to decode", reasonMalformed},
	{"failed to decompress", reasonMalformed},
	{"missing message type byte", reasonMalformed},
	{"msg type (", reasonMalformed},     // "msg type (%d) not supported"
	{"message type (", reasonMalformed}, // "Message type (%d) not supported (packet handler)"
	{"received invalid msgtype", reasonMalformed},
	{"packet too short", reasonMalformed},
	{"cannot decode label", reasonMalformed},
	{"label header cannot be empty", reasonMalformed},
	{"failed to read remote state", reasonMalformed},
	{"larger than limit", reasonMalformed}, // a stream announcing more than 20 MB
	{"failed to receive user message", reasonMalformed},
	// state.go aliveNode: a second node under a live member's name.
	{"conflicting address for", reasonConflict},
	// Remaining refused streams (truncated, timed out).
	{"failed to receive:", reasonOther},
	{"failed push/pull merge", reasonOther},
}

// classifyRejection tells whether a memberlist log line or error reports
// refused inbound traffic, and why.
func classifyRejection(msg string) (string, bool) {
	lower := strings.ToLower(msg)
	for _, p := range rejectionPatterns {
		if strings.Contains(lower, p.substr) {
			return p.reason, true
		}
	}
	return "", false
}

// logWriter receives memberlist's log lines ("[LEVEL] memberlist: text"),
// one per Write, and passes them to logr: ERR as errors, WARN at V(0),
// INFO at V(1), DEBUG dropped. Lines that report refused traffic are
// counted.
type logWriter struct {
	log    logr.Logger
	reject func(reason string)
	closed *atomic.Bool // drop everything once set
}

func (w *logWriter) Write(p []byte) (int, error) {
	if w.closed.Load() {
		return len(p), nil
	}
	level, text := splitLogLine(strings.TrimRight(string(p), "\r\n"))
	if level == "DEBUG" {
		return len(p), nil
	}
	switch level {
	case "WARN":
		w.log.Info(text)
	case "INFO":
		w.log.V(1).Info(text)
	default: // ERR, ERROR, and unprefixed lines ("Err: ...")
		w.log.Error(nil, text)
	}
	if reason, ok := classifyRejection(text); ok {
		w.reject(reason)
	}
	return len(p), nil
}

// splitLogLine splits "[LEVEL] memberlist: text" into LEVEL and text.
func splitLogLine(line string) (level, text string) {
	if rest, ok := strings.CutPrefix(line, "["); ok {
		if lvl, after, ok := strings.Cut(rest, "] "); ok {
			level, line = lvl, after
		}
	}
	return level, strings.TrimPrefix(line, "memberlist: ")
}

type membershipMetrics struct {
	members  prometheus.Gauge
	events   *prometheus.CounterVec
	rejected *prometheus.CounterVec
	rejoins  *prometheus.CounterVec
}

func newMembershipMetrics() *membershipMetrics {
	m := &membershipMetrics{
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshfed_gossip_members",
			Help: "Live gossip members this replica sees, itself included.",
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_gossip_member_events_total",
			Help: "Membership changes seen, by event (join, leave, update).",
		}, []string{"event"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_gossip_rejected_messages_total",
			Help: "Inbound gossip refused, by reason (decrypt, unencrypted, label, malformed, conflict, state, meta, unexpected, other).",
		}, []string{"reason"}),
		rejoins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_gossip_rejoins_total",
			Help: "Joins of members that went away and of the seeds, made while such members have not come back (partition healing), by result (contacted, failed).",
		}, []string{"result"}),
	}
	for _, r := range []string{"contacted", "failed"} {
		m.rejoins.WithLabelValues(r)
	}
	for _, e := range []string{"join", "leave", "update"} {
		m.events.WithLabelValues(e)
	}
	for _, r := range rejectionReasons {
		m.rejected.WithLabelValues(r)
	}
	return m
}

// register registers the metrics with reg (none if nil), all or nothing.
func (m *membershipMetrics) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	cs := []prometheus.Collector{m.members, m.events, m.rejected, m.rejoins}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("gossip: register gossip metrics: %w", err)
		}
	}
	return nil
}

func (m *membershipMetrics) reject(reason string) { m.rejected.WithLabelValues(reason).Inc() }

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
