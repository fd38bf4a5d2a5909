package peerstream

import (
	"fmt"
	"sync"

	"github.com/meshfed/meshfed/federation"
)

// KindHandler handles the peer messages of the kinds it is registered for
// on a Mux: one replicator each (cluster state, trust bundle, fleet
// status).
//
// Concurrency: as Handler. Hello and Receive are called from the goroutine
// of each peer's stream, for different peers concurrently; for one stream,
// Hello comes first and Receive calls follow one at a time in the peer's
// order. Neither may block for long; both may call Peers.Send and
// Peers.Broadcast, which never block.
type KindHandler interface {
	// Hello returns what to send a peer whose stream just opened, before
	// anything broadcast afterwards. hello is the peer's.
	Hello(from federation.ReplicaID, hello *federation.Hello) []*federation.PeerMessage
	// Receive delivers a validated message of one of the handler's kinds.
	Receive(from federation.ReplicaID, msg *federation.PeerMessage)
}

// Mux is a Handler that hands each message to the KindHandler registered
// for its kind (federation.PeerMessage.Kind). Register every handler before
// the Peers it serves run.
type Mux struct {
	mu       sync.RWMutex // guards handlers and order
	handlers map[string]KindHandler
	// order is the registration order: Hello catch-up messages are sent
	// in it (cluster state before the trust bundle before fleet status).
	order []KindHandler
}

// NewMux returns a Mux with no handlers.
func NewMux() *Mux { return &Mux{handlers: map[string]KindHandler{}} }

// Handle registers h for kinds. It fails for a kind that is not one of
// federation.PeerKinds, for the transport's own Hello, and for a kind
// already registered.
func (m *Mux) Handle(h KindHandler, kinds ...string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	known := map[string]bool{}
	for _, k := range federation.PeerKinds() {
		known[k] = true
	}
	for _, k := range kinds {
		switch {
		case !known[k] || k == federation.KindHello:
			return fmt.Errorf("%w: mux: kind %q cannot be handled", ErrInvalidPeerOptions, k)
		case m.handlers[k] != nil:
			return fmt.Errorf("%w: mux: kind %q handled twice", ErrInvalidPeerOptions, k)
		}
	}
	for _, k := range kinds {
		m.handlers[k] = h
	}
	m.order = append(m.order, h)
	return nil
}

// PeerHello implements Handler: every handler's catch-up, in registration
// order.
func (m *Mux) PeerHello(from federation.ReplicaID, hello *federation.Hello) []*federation.PeerMessage {
	m.mu.RLock()
	order := m.order
	m.mu.RUnlock()
	var out []*federation.PeerMessage
	for _, h := range order {
		out = append(out, h.Hello(from, hello)...)
	}
	return out
}

// PeerMessage implements Handler. A message of a kind nobody handles is
// dropped.
func (m *Mux) PeerMessage(from federation.ReplicaID, msg *federation.PeerMessage) {
	m.mu.RLock()
	h := m.handlers[msg.Kind()]
	m.mu.RUnlock()
	if h != nil {
		h.Receive(from, msg)
	}
}
