package podagent

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/meshfed/meshfed/pkg/pki"
)

// ErrInvalidOptions means Options cannot make a working agent; errors of
// Run and Bootstrap about Options wrap it.
var ErrInvalidOptions = errors.New("podagent: invalid options")

// Paths and address of the grpc-agent injection template, the defaults of
// cmd/meshfed-agent.
const (
	// DefaultTokenFile is the projected service account token (audience
	// istio-ca).
	DefaultTokenFile = "/var/run/secrets/tokens/istio-token"
	// DefaultCARootsFile holds the roots of the istio-ca-root-cert
	// ConfigMap.
	DefaultCARootsFile = "/var/run/secrets/istio/root-cert.pem"
	// DefaultLabelsFile is the downward API file of the Pod's labels.
	DefaultLabelsFile = "/etc/istio/pod/labels"
	// DefaultReadyAddr is where the startup probe asks.
	DefaultReadyAddr = ":15020"
	// ReadyPath is the path of the readiness endpoint.
	ReadyPath = "/healthz/ready"
)

// Options configure Run. DefaultOptions gives the defaults; the zero
// value of a field with a default (below) means the default.
type Options struct {
	// DiscoveryAddress is the hub's xDS address, host:port, written into
	// the bootstrap; default CAAddress, the hub's authenticated port, which
	// serves xDS beside the certificates.
	DiscoveryAddress string
	// XDSPlaintext makes the bootstrap dial DiscoveryAddress in plaintext
	// (the hub's unauthenticated port, which hub charts leave off) instead
	// of mutual TLS with the workload's certificate.
	XDSPlaintext bool
	// CAAddress is the hub's CA address, host:port (TLS). Required.
	CAAddress string
	// CARootsFile holds the PEM roots that verify the CA's certificate.
	// Required.
	CARootsFile string
	// CAServerName is the name checked in the CA's certificate; default the
	// host of CAAddress.
	CAServerName string
	// TokenFile holds the Pod's service account token for the CA, read
	// before every request. Required.
	TokenFile string
	// CertDir receives cert-chain.pem, key.pem and root-cert.pem. Required.
	CertDir string
	// BootstrapPath is where the gRPC xDS bootstrap is written. Required.
	BootstrapPath string
	// ReadyAddr is the address of the readiness endpoint; default
	// DefaultReadyAddr. Ignored when Listener is set.
	ReadyAddr string
	// Listener, when set, serves the readiness endpoint instead of a new
	// listener on ReadyAddr; Run closes it.
	Listener net.Listener
	// LabelsFile is the downward API file of the Pod's labels (see
	// ParseLabels). A missing file, or an empty LabelsFile, means no
	// labels.
	LabelsFile string
	// PodName, PodNamespace, InstanceIP (the Pod's IP) and ServiceAccount
	// describe the Pod. Required.
	PodName, PodNamespace, InstanceIP, ServiceAccount string
	// ClusterID is the Pod's cluster, as the hub's remote secret names it.
	// Required.
	ClusterID string
	// Network is the Pod's network; empty leaves NETWORK out of the node
	// metadata.
	Network string
	// TrustDomain is the trust domain of the workload's SPIFFE ID; default
	// cluster.local.
	TrustDomain pki.TrustDomain
	// DomainSuffix is the cluster's DNS domain, in the node ID; default
	// cluster.local.
	DomainSuffix string
	// CertTTL is the certificate lifetime asked of the CA; zero lets the CA
	// choose.
	CertTTL time.Duration
	// CertRefreshInterval is how often the application's gRPC re-reads the
	// certificate files (the file_watcher refresh_interval of the
	// bootstrap); default 10s.
	CertRefreshInterval time.Duration
	// Log receives the agent's log; default discard.
	Log logr.Logger
}

// DefaultOptions returns the defaults of Options, with the paths of the
// grpc-agent injection template.
func DefaultOptions() Options {
	return Options{
		TokenFile:           DefaultTokenFile,
		CARootsFile:         DefaultCARootsFile,
		LabelsFile:          DefaultLabelsFile,
		ReadyAddr:           DefaultReadyAddr,
		TrustDomain:         pki.DefaultTrustDomain,
		DomainSuffix:        "cluster.local",
		CertRefreshInterval: 10 * time.Second,
		Log:                 logr.Discard(),
	}
}

// withDefaults fills the fields whose zero value means the default.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.ReadyAddr == "" {
		o.ReadyAddr = d.ReadyAddr
	}
	if o.TrustDomain == "" {
		o.TrustDomain = d.TrustDomain
	}
	if o.DomainSuffix == "" {
		o.DomainSuffix = d.DomainSuffix
	}
	if o.CertRefreshInterval == 0 {
		o.CertRefreshInterval = d.CertRefreshInterval
	}
	if o.CAServerName == "" {
		if host, _, err := net.SplitHostPort(o.CAAddress); err == nil {
			o.CAServerName = host
		}
	}
	if o.DiscoveryAddress == "" {
		o.DiscoveryAddress = o.CAAddress
	}
	if o.Log.GetSink() == nil {
		o.Log = d.Log
	}
	return o
}

// validateBootstrap checks the fields Bootstrap uses, after withDefaults.
func (o Options) validateBootstrap() []string {
	var bad []string
	required := func(name, v string) {
		if v == "" {
			bad = append(bad, name+" is required")
		}
	}
	if o.DiscoveryAddress == "" {
		bad = append(bad, "DiscoveryAddress is required")
	} else if _, _, err := net.SplitHostPort(o.DiscoveryAddress); err != nil {
		bad = append(bad, fmt.Sprintf("DiscoveryAddress %q is not host:port", o.DiscoveryAddress))
	}
	required("CertDir", o.CertDir)
	required("PodName", o.PodName)
	required("PodNamespace", o.PodNamespace)
	if o.InstanceIP == "" {
		bad = append(bad, "InstanceIP is required")
	} else if _, err := netip.ParseAddr(o.InstanceIP); err != nil {
		bad = append(bad, fmt.Sprintf("InstanceIP %q is not an IP address", o.InstanceIP))
	}
	required("ServiceAccount", o.ServiceAccount)
	required("ClusterID", o.ClusterID)
	required("DomainSuffix", o.DomainSuffix)
	if o.CertRefreshInterval <= 0 {
		bad = append(bad, fmt.Sprintf("CertRefreshInterval %v is not positive", o.CertRefreshInterval))
	}
	return bad
}

// validate checks all of Options, after withDefaults.
func (o Options) validate() error {
	bad := o.validateBootstrap()
	if o.CAAddress == "" {
		bad = append(bad, "CAAddress is required")
	} else if _, _, err := net.SplitHostPort(o.CAAddress); err != nil {
		bad = append(bad, fmt.Sprintf("CAAddress %q is not host:port", o.CAAddress))
	} else if o.CAServerName == "" {
		bad = append(bad, fmt.Sprintf("CAServerName is required: CAAddress %q has no host", o.CAAddress))
	}
	if o.CARootsFile == "" {
		bad = append(bad, "CARootsFile is required")
	}
	if o.TokenFile == "" {
		bad = append(bad, "TokenFile is required")
	}
	if o.BootstrapPath == "" {
		bad = append(bad, "BootstrapPath is required")
	}
	if o.TrustDomain == "" {
		bad = append(bad, "TrustDomain is required")
	}
	if o.CertTTL < 0 {
		bad = append(bad, fmt.Sprintf("CertTTL %v is negative", o.CertTTL))
	}
	return invalid(bad)
}

// invalid returns an error wrapping ErrInvalidOptions that lists bad, or
// nil when bad is empty.
func invalid(bad []string) error {
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidOptions, strings.Join(bad, "; "))
}

// Identity is the SPIFFE ID of the Pod's workload certificate,
// spiffe://<TrustDomain>/ns/<PodNamespace>/sa/<ServiceAccount>.
func (o Options) Identity() string {
	td := o.TrustDomain
	if td == "" {
		td = DefaultOptions().TrustDomain
	}
	return td.WorkloadID(o.PodNamespace, o.ServiceAccount).String()
}
