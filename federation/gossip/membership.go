package gossip

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/hashicorp/memberlist"
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

const (
	// leaveTimeout bounds the wait for the leave broadcast on shutdown; the
	// broadcast goes out on the next gossip tick (500 ms), so this is only
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

	mu      sync.Mutex                      // guards members and departed
	members map[federation.ReplicaID]Member // live members, self included
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

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
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

// logEvent logs a membership event unless memberlist is shutting down:
// its suspicion timers may still declare a member dead after Shutdown
// returns, when whoever owns the logger (a test, say) has gone.
func (m *Membership) logEvent(msg string, kv ...any) {
	if m.shutdown.Load() {
		return
	}
	m.log.Info(msg, kv...)
}
