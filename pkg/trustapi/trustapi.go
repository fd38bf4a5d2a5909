package trustapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshfed/meshfed/pkg/pki"
)

// Names of the service and its method.
const (
	ServiceName     = "meshfed.trust.v1.TrustBundle"
	MethodWatch     = "Watch"
	FullMethodWatch = "/" + ServiceName + "/" + MethodWatch
)

// Request metadata keys. gRPC lower-cases keys on the wire.
const (
	MetadataAuthorization = "authorization"
	MetadataClusterID     = "ClusterID"
	MetadataSpokeVersion  = "x-meshfed-spoke-version"
	// MetadataClient says what kind of client watches: ClientSpoke or
	// ClientAgent. Absent means ClientSpoke.
	MetadataClient = "x-meshfed-client"
)

// Values of MetadataClient.
const (
	// ClientSpoke is a spoke shim, which the hub lists as its cluster's
	// spoke.
	ClientSpoke = "spoke"
	// ClientAgent is a workload certificate agent (pkg/agent), which
	// watches only to keep its roots current; the hub does not list it.
	ClientAgent = "agent"
)

// Root is one trust anchor of the bundle.
type Root struct {
	// TrustDomain is the SPIFFE trust domain the root anchors.
	TrustDomain pki.TrustDomain `json:"trustDomain"`
	// PEM is one PEM CERTIFICATE block.
	PEM string `json:"pem"`
	// Fingerprint is the lower-case hex SHA-256 of the certificate's DER.
	Fingerprint string `json:"fingerprint"`
}

// Bundle is the whole federated trust bundle, one message of Watch.
type Bundle struct {
	Version string `json:"version"`
	Roots   []Root `json:"roots"`
}

// NewBundle sorts roots by fingerprint (dropping duplicates) and sets the
// version.
func NewBundle(roots []Root) Bundle {
	rs := slices.Clone(roots)
	slices.SortFunc(rs, func(a, b Root) int { return strings.Compare(a.Fingerprint, b.Fingerprint) })
	rs = slices.CompactFunc(rs, func(a, b Root) bool { return a.Fingerprint == b.Fingerprint })
	if rs == nil {
		rs = []Root{}
	}
	h := sha256.New()
	for _, r := range rs {
		h.Write([]byte(r.Fingerprint))
		h.Write([]byte{0})
	}
	return Bundle{Version: hex.EncodeToString(h.Sum(nil))[:16], Roots: rs}
}

// PEM is the concatenated PEM of every root, each ending in a newline: the
// value of root-cert.pem in istio-ca-root-cert.
func (b Bundle) PEM() []byte {
	var buf bytes.Buffer
	for _, r := range b.Roots {
		p := strings.TrimSpace(r.PEM)
		if p == "" {
			continue
		}
		buf.WriteString(p)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// Encode turns b into a Watch response.
func Encode(b Bundle) (*wrapperspb.BytesValue, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("trustapi: encode: %w", err)
	}
	return wrapperspb.Bytes(raw), nil
}

// Decode reads a Watch response.
func Decode(m *wrapperspb.BytesValue) (Bundle, error) {
	var b Bundle
	if m == nil {
		return b, fmt.Errorf("trustapi: decode: nil message")
	}
	if err := json.Unmarshal(m.GetValue(), &b); err != nil {
		return b, fmt.Errorf("trustapi: decode: %w", err)
	}
	return b, nil
}

// TrustBundleServer is the server side of the service.
type TrustBundleServer interface {
	Watch(*wrapperspb.BytesValue, grpc.ServerStreamingServer[wrapperspb.BytesValue]) error
}

func watchHandler(srv any, stream grpc.ServerStream) error {
	m := new(wrapperspb.BytesValue)
	if err := stream.RecvMsg(m); err != nil {
		return err
	}
	return srv.(TrustBundleServer).Watch(m, &grpc.GenericServerStream[wrapperspb.BytesValue, wrapperspb.BytesValue]{ServerStream: stream})
}

// StreamDescWatch describes Watch for clients.
var StreamDescWatch = grpc.StreamDesc{StreamName: MethodWatch, Handler: watchHandler, ServerStreams: true}

// ServiceDesc is the grpc.ServiceDesc of meshfed.trust.v1.TrustBundle.
var ServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*TrustBundleServer)(nil),
	Streams:     []grpc.StreamDesc{StreamDescWatch},
	Metadata:    "meshfed/trust/v1/trust.proto (hand-written; see package trustapi)",
}

// RegisterTrustBundleServer registers srv on s.
func RegisterTrustBundleServer(s grpc.ServiceRegistrar, srv TrustBundleServer) {
	s.RegisterService(&ServiceDesc, srv)
}

// Watch opens the stream; put the metadata on ctx
// (metadata.AppendToOutgoingContext) first.
func Watch(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) (grpc.ServerStreamingClient[wrapperspb.BytesValue], error) {
	stream, err := cc.NewStream(ctx, &StreamDescWatch, FullMethodWatch, opts...)
	if err != nil {
		return nil, err
	}
	x := &grpc.GenericClientStream[wrapperspb.BytesValue, wrapperspb.BytesValue]{ClientStream: stream}
	if err := x.SendMsg(wrapperspb.Bytes(nil)); err != nil {
		return nil, err
	}
	if err := x.CloseSend(); err != nil {
		return nil, err
	}
	return x, nil
}
