package framework

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// EDSUpdate is one ClusterLoadAssignment received by an ADSWatcher.
type EDSUpdate struct {
	// Assignment is the received resource.
	Assignment *endpointv3.ClusterLoadAssignment
	// Received is when the response carrying it was read off the stream.
	Received time.Time
	// Version and Nonce are those of the response.
	Version, Nonce string
}

// ADSWatcher is a raw state-of-the-world ADS stream to the hub that
// subscribes to EDS (or other types, see Watch), ACKs every response, and hands every received
// ClusterLoadAssignment over with its receive time. It measures push
// latency without a gRPC data plane in between.
type ADSWatcher struct {
	conn   *grpc.ClientConn
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	cancel context.CancelFunc
	node   *corev3.Node

	sendMu   sync.Mutex
	reject   string // when set, every response is NACKed with it
	nodeSent bool
	names    map[string][]string // subscribed names per type URL
	versions map[string]string   // last ACKed version per type URL
	nonces   map[string]string   // last received nonce per type URL

	updates chan EDSUpdate
	done    chan struct{}
	err     error // set before done is closed

	closeOnce sync.Once
	closeErr  error
}

// ADSWatcherBuffer is the capacity of ADSWatcher.Updates. When it is full
// the watcher stops reading the stream (after ACKing) until there is room.
const ADSWatcherBuffer = 4096

// NewADSWatcher opens an ADS stream to hubAddr as node, dialed with
// dialOpts: for the hub's authenticated port (Hub.CAAddr),
// grpc.WithTransportCredentials of a CertAgent of the node's namespace;
// none dials plaintext (HubOptions.PlaintextXDS). ctx bounds the stream's
// whole life; Close ends it earlier. Subscribe with WatchEDS.
func NewADSWatcher(ctx context.Context, hubAddr string, node *corev3.Node, dialOpts ...grpc.DialOption) (*ADSWatcher, error) {
	if node == nil || node.GetId() == "" {
		return nil, errors.New("framework: ADS watcher needs a node with an ID")
	}
	if len(dialOpts) == 0 {
		dialOpts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(hubAddr, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("framework: ADS watcher: dialing %s: %w", hubAddr, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		cancel()
		_ = conn.Close()
		return nil, fmt.Errorf("framework: ADS watcher: opening stream to %s: %w", hubAddr, err)
	}
	w := &ADSWatcher{
		conn: conn, stream: stream, cancel: cancel, node: node,
		names: map[string][]string{}, versions: map[string]string{}, nonces: map[string]string{},
		updates: make(chan EDSUpdate, ADSWatcherBuffer),
		done:    make(chan struct{}),
	}
	go w.recvLoop(sctx)
	return w, nil
}

// WatchEDS sets the EDS subscription to exactly the given cluster names.
func (w *ADSWatcher) WatchEDS(names ...string) error {
	return w.Watch(resourcev3.EndpointType, names...)
}

// Watch sets the subscription of typeURL to exactly names (none: a
// wildcard). Responses of types other than EDS are ACKed (or NACKed, see
// RejectAll) and not delivered.
func (w *ADSWatcher) Watch(typeURL string, names ...string) error {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	w.names[typeURL] = slices.Clone(names)
	return w.sendLocked(&discoveryv3.DiscoveryRequest{
		TypeUrl:       typeURL,
		ResourceNames: w.names[typeURL],
		VersionInfo:   w.versions[typeURL],
		ResponseNonce: w.nonces[typeURL],
	})
}

func (w *ADSWatcher) sendLocked(req *discoveryv3.DiscoveryRequest) error {
	if !w.nodeSent {
		req.Node = w.node
	}
	if err := w.stream.Send(req); err != nil {
		return fmt.Errorf("framework: ADS watcher: send: %w", err)
	}
	w.nodeSent = true
	return nil
}

// ack ACKs resp, or NACKs it when rejectErr is set.
func (w *ADSWatcher) ack(resp *discoveryv3.DiscoveryResponse, rejectErr error) error {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	t := resp.GetTypeUrl()
	w.nonces[t] = resp.GetNonce()
	req := &discoveryv3.DiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce(), ResourceNames: w.names[t]}
	if rejectErr != nil {
		req.VersionInfo = w.versions[t]
		req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: rejectErr.Error()}
	} else {
		w.versions[t] = resp.GetVersionInfo()
		req.VersionInfo = resp.GetVersionInfo()
	}
	return w.sendLocked(req)
}

func (w *ADSWatcher) recvLoop(ctx context.Context) {
	var endErr error
	defer func() {
		w.err = endErr
		close(w.done)
		close(w.updates)
	}()
	for {
		resp, err := w.stream.Recv()
		received := time.Now()
		if err != nil {
			if ctx.Err() == nil {
				endErr = fmt.Errorf("framework: ADS watcher: stream ended: %w", err)
			}
			return
		}
		var (
			clas      []*endpointv3.ClusterLoadAssignment
			decodeErr error
		)
		if resp.GetTypeUrl() == resourcev3.EndpointType {
			for _, res := range resp.GetResources() {
				cla := &endpointv3.ClusterLoadAssignment{}
				if err := res.UnmarshalTo(cla); err != nil {
					decodeErr = fmt.Errorf("decoding %s: %w", res.GetTypeUrl(), err)
					clas = nil
					break
				}
				clas = append(clas, cla)
			}
		}
		w.sendMu.Lock()
		if w.reject != "" && decodeErr == nil {
			decodeErr = errors.New(w.reject)
			clas = nil
		}
		w.sendMu.Unlock()
		if err := w.ack(resp, decodeErr); err != nil {
			if ctx.Err() == nil {
				endErr = err
			}
			return
		}
		for _, cla := range clas {
			select {
			case w.updates <- EDSUpdate{Assignment: cla, Received: received, Version: resp.GetVersionInfo(), Nonce: resp.GetNonce()}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// RejectAll makes the watcher NACK every later response with message, as
// a proxy that rejects its configuration does; an empty message goes back
// to ACKing.
func (w *ADSWatcher) RejectAll(message string) {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	w.reject = message
}

// Updates delivers every received ClusterLoadAssignment in order. It is
// closed when the stream ends.
func (w *ADSWatcher) Updates() <-chan EDSUpdate { return w.updates }

// Done is closed when the stream has ended.
func (w *ADSWatcher) Done() <-chan struct{} { return w.done }

// Err returns why the stream ended: nil while it runs or after Close.
func (w *ADSWatcher) Err() error {
	select {
	case <-w.done:
		return w.err
	default:
		return nil
	}
}

// Close ends the stream and waits for the receiver to stop. Idempotent.
func (w *ADSWatcher) Close() error {
	w.closeOnce.Do(func() {
		w.cancel()
		<-w.done
		w.closeErr = w.conn.Close()
	})
	return w.closeErr
}
