package spoke

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/meshfed/meshfed/pkg/pki"
)

// devCertValidity is how long a generated development certificate lasts:
// long enough for a development cluster, short enough not to pass for a
// real one. A restart makes a new one.
const devCertValidity = 365 * 24 * time.Hour

// certSource gives the serving certificate for each TLS handshake.
type certSource interface {
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

// fileCert serves a certificate from PEM files and reads them again when
// either changes, so a rotated Secret (kubelet updates the mounted files)
// takes effect without a restart. A rotation that cannot be read keeps the
// previous certificate in use.
type fileCert struct {
	certFile, keyFile string
	log               logr.Logger

	mu sync.Mutex // guards the fields below
	// cert is the certificate in use, read from files with the
	// modification times certMod and keyMod.
	cert            *tls.Certificate
	certMod, keyMod time.Time
}

func newFileCert(certFile, keyFile string, log logr.Logger) (*fileCert, error) {
	f := &fileCert{certFile: certFile, keyFile: keyFile, log: log}
	if _, err := f.GetCertificate(nil); err != nil {
		return nil, err
	}
	return f, nil
}

// GetCertificate returns the current certificate, reloading it first when
// the files have changed. Safe for concurrent use.
func (f *fileCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cs, errC := os.Stat(f.certFile)
	ks, errK := os.Stat(f.keyFile)
	if errC == nil && errK == nil && f.cert != nil && cs.ModTime().Equal(f.certMod) && ks.ModTime().Equal(f.keyMod) {
		return f.cert, nil
	}
	if errC != nil || errK != nil {
		return f.keepLocked(fmt.Errorf("spoke: serving certificate: %w", firstErr(errC, errK)))
	}
	cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return f.keepLocked(fmt.Errorf("spoke: serving certificate: %w", err))
	}
	f.cert, f.certMod, f.keyMod = &cert, cs.ModTime(), ks.ModTime()
	f.log.Info("serving certificate loaded", "cert", f.certFile)
	return f.cert, nil
}

// keepLocked keeps serving the previous certificate after a failed reload,
// or fails when there is none.
func (f *fileCert) keepLocked(err error) (*tls.Certificate, error) {
	if f.cert == nil {
		return nil, err
	}
	f.log.Error(err, "keeping the previous serving certificate")
	return f.cert, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// staticCert is a certificate made at start.
type staticCert struct{ cert *tls.Certificate }

func (s staticCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cert, nil
}

// devCert makes a CA and a serving certificate for hosts (DNS names and IP
// addresses), returning the certificate and the CA's PEM for caBundle.
func devCert(hosts []string, now time.Time) (*tls.Certificate, []byte, error) {
	ca, err := pki.NewCA("meshfed-spoke development CA", devCertValidity, now)
	if err != nil {
		return nil, nil, fmt.Errorf("spoke: development CA: %w", err)
	}
	opts := pki.IssueOptions{CommonName: "meshfed-spoke", Validity: devCertValidity, Server: true, Now: now}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if ip := net.ParseIP(h); ip != nil {
			opts.IPs = append(opts.IPs, ip)
		} else if h != "" {
			opts.DNSNames = append(opts.DNSNames, h)
		}
	}
	certPEM, keyPEM, err := ca.Issue(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("spoke: development certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("spoke: development certificate: %w", err)
	}
	return &cert, ca.CertPEM, nil
}
