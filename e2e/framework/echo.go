package framework

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The echo service every workload replica serves. It is declared by hand
// (no protoc): one unary method whose request and response are
// google.protobuf.StringValue; the response is the server's identity.
const (
	// EchoServiceName is the fully qualified gRPC service name.
	EchoServiceName = "meshfed.e2e.Echo"
	// EchoMethod is the full method name clients invoke.
	EchoMethod = "/" + EchoServiceName + "/Echo"
)

// echoHandler is what the hand-written service descriptor dispatches to.
type echoHandler interface {
	echo(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

func newEchoServiceDesc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: EchoServiceName,
		HandlerType: (*echoHandler)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Echo",
			Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := srv.(echoHandler)
				if interceptor == nil {
					return h.echo(ctx, in)
				}
				info := &grpc.UnaryServerInfo{Server: srv, FullMethod: EchoMethod}
				return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
					return h.echo(ctx, req.(*wrapperspb.StringValue))
				})
			},
		}},
		Metadata: "meshfed/e2e/echo",
	}
}

// CallEcho invokes the echo method once over cc and returns the identity of
// the server that answered.
func CallEcho(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, EchoMethod, wrapperspb.String("ping"), out, opts...); err != nil {
		return "", err
	}
	return out.GetValue(), nil
}

// EchoServer is a real gRPC server answering the echo service with a fixed
// identity, conventionally "<cluster>/<pod>".
type EchoServer struct {
	identity string
	addr     netip.AddrPort
	srv      grpcServer
	served   atomic.Int64
	done     chan struct{}
	stopOnce sync.Once

	// serving is closed when an xDS server first serves; nil for a plain
	// server, which serves at once.
	serving chan struct{}
	modeMu  sync.Mutex
	modeErr error  // last serving-mode error of an xDS server
	peerID  string // client SPIFFE ID of the last call
	// peerIssuers counts calls by the issuer of the client certificate.
	peerIssuers map[string]int

	faultMu sync.Mutex // guards faults and faultCalls
	faults  *EchoFaults
	// faultCalls counts the calls since faults were last set.
	faultCalls int
}

// EchoFaults make an echo server misbehave, so that tests can see what a
// client's xDS configuration (retries, timeouts, outlier detection) does
// about it. The zero value misbehaves in no way.
type EchoFaults struct {
	// FailEvery, when positive, fails every FailEvery-th call counted from
	// when the faults were set: 1 fails every call, 2 the second, fourth, …
	FailEvery int
	// Code is the status of the failed calls. Default UNAVAILABLE.
	Code codes.Code
	// Delay, when positive, holds every call that long before it is
	// answered or failed; a call whose caller gives up first ends then,
	// with the status of its context's error.
	Delay time.Duration
}

// grpcServer is what EchoServer needs of *grpc.Server and of grpc-go's
// xDS-enabled *xds.GRPCServer.
type grpcServer interface {
	RegisterService(*grpc.ServiceDesc, any)
	Serve(net.Listener) error
	Stop()
	GracefulStop()
}

// StartEchoServer listens on addr (host:port; port 0 picks one) and serves
// the echo service until Stop.
func StartEchoServer(addr, identity string) (*EchoServer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("framework: echo server %s: %w", identity, err)
	}
	ap, err := netip.ParseAddrPort(l.Addr().String())
	if err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("framework: echo server address: %w", err)
	}
	gs := grpc.NewServer()
	s := &EchoServer{identity: identity, addr: ap, srv: gs, done: make(chan struct{})}
	gs.RegisterService(newEchoServiceDesc(), s)
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(l)
	}()
	return s, nil
}

func (s *EchoServer) echo(ctx context.Context, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	s.served.Add(1)
	if err := s.misbehave(ctx); err != nil {
		return nil, err
	}
	var id, issuer string
	if p, ok := peer.FromContext(ctx); ok {
		id, issuer = peerOf(p.AuthInfo)
	}
	s.modeMu.Lock()
	s.peerID = id
	if issuer != "" {
		if s.peerIssuers == nil {
			s.peerIssuers = map[string]int{}
		}
		s.peerIssuers[issuer]++
	}
	s.modeMu.Unlock()
	return wrapperspb.String(s.identity), nil
}

// SetFaults makes the server misbehave as f says from its next call on
// (nil: behave), counting calls afresh for FailEvery. f is copied.
func (s *EchoServer) SetFaults(f *EchoFaults) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	s.faults, s.faultCalls = nil, 0
	if f != nil {
		c := *f
		if c.Code == codes.OK {
			c.Code = codes.Unavailable
		}
		s.faults = &c
	}
}

// fault counts a call under the server's faults and returns what to do
// to it: how long to hold it, then the error to fail it with (nil:
// answer).
func (s *EchoServer) fault() (time.Duration, error) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	f := s.faults
	if f == nil {
		return 0, nil
	}
	s.faultCalls++
	var err error
	if f.FailEvery > 0 && s.faultCalls%f.FailEvery == 0 {
		err = status.Errorf(f.Code, "echo %s: injected failure of call %d", s.identity, s.faultCalls)
	}
	return f.Delay, err
}

// misbehave applies the server's faults to one call: nil when the call is
// to be answered.
func (s *EchoServer) misbehave(ctx context.Context) error {
	delay, err := s.fault()
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	return err
}

// Identity returns what the server answers.
func (s *EchoServer) Identity() string { return s.identity }

// Addr returns the address the server listens on.
func (s *EchoServer) Addr() netip.AddrPort { return s.addr }

// Served returns how many calls reached the server, including those its
// faults failed.
func (s *EchoServer) Served() int64 { return s.served.Load() }

// Stop stops the server: in-flight calls get up to a second to finish,
// then connections are closed. It is idempotent and waits for the server.
func (s *EchoServer) Stop() {
	s.stopOnce.Do(func() {
		graceful := make(chan struct{})
		go func() {
			s.srv.GracefulStop()
			close(graceful)
		}()
		select {
		case <-graceful:
		case <-time.After(time.Second):
			s.srv.Stop()
			<-graceful
		}
		<-s.done
	})
}
