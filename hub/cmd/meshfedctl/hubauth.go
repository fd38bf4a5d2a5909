package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/rest"
)

// hubAuth is how proxy-status authenticates to a hub's authenticated port
// (15012): a Kubernetes token over TLS, as istioctl proxy-status
// --xds-address does; the config cluster reviews the token.
type hubAuth struct {
	Token, TokenFile string
	// Kubeconfig sends the kubeconfig's current user's token instead
	// (monitoring-port commands).
	Kubeconfig bool
	// CAFile verifies the hub's certificate; empty: the system's roots.
	CAFile string
	// ServerName is checked in the hub's certificate; empty: the host of
	// the address dialed.
	ServerName string
}

// token returns the token of --token or --token-file ("" for none).
func (a hubAuth) token() (string, error) {
	if a.Kubeconfig && (a.Token != "" || a.TokenFile != "") {
		return "", errors.New("--kubeconfig-token with --token or --token-file: give one")
	}
	if a.TokenFile == "" {
		return a.Token, nil
	}
	if a.Token != "" {
		return "", errors.New("--token and --token-file: give one")
	}
	b, err := os.ReadFile(a.TokenFile)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// dialOptions returns the transport of a call to the hub: plaintext
// without a token, else TLS with the token on every call.
func (a hubAuth) dialOptions() ([]grpc.DialOption, error) {
	token, err := a.token()
	if err != nil {
		return nil, err
	}
	if token == "" {
		if a.CAFile != "" || a.ServerName != "" {
			return nil, errors.New("--ca-file and --server-name need --token or --token-file (the authenticated port)")
		}
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: a.ServerName}
	if a.CAFile != "" {
		pem, err := os.ReadFile(a.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", a.CAFile)
		}
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithPerRPCCredentials(bearer(token)),
	}, nil
}

// kubeconfigTransport is an HTTP transport that authenticates as the
// kubeconfig's current user (a static token, a token file, or an exec
// plugin), as kubectl would to its apiserver.
func kubeconfigTransport(k kubeconfigFlags) (http.RoundTripper, error) {
	cfg, err := k.restConfig()
	if err != nil {
		return nil, err
	}
	if cfg.BearerToken == "" && cfg.BearerTokenFile == "" && cfg.ExecProvider == nil && cfg.AuthProvider == nil {
		return nil, errors.New("the kubeconfig's current user has no token (a client certificate cannot be sent to the monitoring port): give --token or --token-file")
	}
	// Only the user's credentials: the monitoring port is not the
	// apiserver, whose CA and server name do not apply.
	return rest.HTTPWrappersForConfig(&rest.Config{BearerToken: cfg.BearerToken, BearerTokenFile: cfg.BearerTokenFile,
		ExecProvider: cfg.ExecProvider, AuthProvider: cfg.AuthProvider, Host: cfg.Host}, http.DefaultTransport)
}

// bearer sends a token as "authorization: Bearer <token>", over TLS only.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }
