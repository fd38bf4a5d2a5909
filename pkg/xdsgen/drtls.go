package xdsgen

import (
	"net/netip"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
)

// A DestinationRule's tls (ClientTLSSettings), taken from the effective
// policy of a cluster's port and subset (effectivePolicy), overrides auto
// mTLS for that cluster, External and DNS-resolved services included:
//
//   - DISABLE: plaintext, for both proxy kinds;
//   - ISTIO_MUTUAL: the mesh's mutual TLS whatever the endpoints' labels,
//     as auto mTLS builds it (proxyless: the certificate provider
//     UpstreamTlsContext; Envoy: the "tlsMode-istio" socket as the
//     cluster's only transport_socket), with the rule's sni and
//     subjectAltNames when it sets them;
//   - SIMPLE, MUTUAL (TLS origination): for Envoy a transport_socket whose
//     UpstreamTlsContext has the rule's files (originationTLS) and which is
//     not Istio mutual TLS (MTLSClusters leaves the cluster out). grpc-go
//     takes certificates only from certificate provider instances of its
//     bootstrap: securityConfigFromCommonTLSContextUsingNewFields NACKs
//     tls_certificates and tls_certificate_sds_secret_configs and ignores
//     trusted_ca (google.golang.org/grpc@v1.85.0
//     internal/xds/xdsclient/xdsresource/unmarshal_cds.go:492-498 and
//     :568-572), and takes system roots only behind
//     GRPC_EXPERIMENTAL_XDS_SYSTEM_ROOT_CERTS (:550-563, off by default,
//     internal/envconfig/xds.go:65), so proxyless clusters keep what auto
//     mTLS decides, with a note.

// sdsSecretPrefix is the prefix of the SDS names of Kubernetes Secrets
// that Istio's proxies use for credentialName.
const sdsSecretPrefix = "kubernetes://"

// sdsCACertSuffix is Istio's suffix of the SDS name of the CA part of a
// credentialName Secret.
const sdsCACertSuffix = "-cacert"

// maxSNILength is the longest SNI Envoy's validation (and grpc-go, when it
// sends SNI) accepts.
const maxSNILength = 255

// drTLS is the tls of DestinationRule dr's effective policy for port of
// subset ("" for the whole service); nil when none sets one.
func drTLS(dr *istioconfig.DestinationRule, port uint32, subset string) *networking.ClientTLSSettings {
	return effectivePolicy(dr, port, subset).GetTls()
}

// tlsOverride is what tls settings t decide about Istio mutual TLS for a
// cluster of kind k: secure or not when decided, auto mTLS otherwise (no
// tls, or SIMPLE/MUTUAL for grpc-go, which cannot originate TLS from
// files).
func tlsOverride(k ProxyKind, t *networking.ClientTLSSettings) (secure, decided bool) {
	if t == nil {
		return false, false
	}
	switch t.GetMode() {
	case networking.ClientTLSSettings_ISTIO_MUTUAL:
		return true, true
	case networking.ClientTLSSettings_DISABLE:
		return false, true
	case networking.ClientTLSSettings_SIMPLE, networking.ClientTLSSettings_MUTUAL:
		return false, k.Can().OriginateTLS.Can()
	}
	return false, false
}

// originates reports whether t makes an Envoy cluster originate TLS
// (SIMPLE or MUTUAL).
func originates(t *networking.ClientTLSSettings) bool {
	m := t.GetMode()
	return t != nil && (m == networking.ClientTLSSettings_SIMPLE || m == networking.ClientTLSSettings_MUTUAL)
}

// istioSANs are the SANs of Istio mutual TLS under t: the rule's
// subjectAltNames when it sets them, else def.
func istioSANs(t *networking.ClientTLSSettings, def []string) []string {
	if t.GetMode() == networking.ClientTLSSettings_ISTIO_MUTUAL && len(t.GetSubjectAltNames()) > 0 {
		return t.GetSubjectAltNames()
	}
	return def
}

// tlsSNI is t's sni when it is set and short enough for Envoy, else def.
func tlsSNI(t *networking.ClientTLSSettings, def string) string {
	if s := t.GetSni(); s != "" && len(s) <= maxSNILength {
		return s
	}
	if len(def) > maxSNILength {
		return ""
	}
	return def
}

// sanMatcher is an exact SAN matcher of san, typed as Envoy wants it: URI
// for a URI (a SPIFFE ID), IP_ADDRESS for an IP address, else DNS.
func sanMatcher(san string) *tlsv3.SubjectAltNameMatcher {
	typ := tlsv3.SubjectAltNameMatcher_DNS
	if strings.Contains(san, "://") {
		typ = tlsv3.SubjectAltNameMatcher_URI
	} else if _, err := netip.ParseAddr(san); err == nil {
		typ = tlsv3.SubjectAltNameMatcher_IP_ADDRESS
	}
	return &tlsv3.SubjectAltNameMatcher{
		SanType: typ,
		Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: san}},
	}
}

// sanMatchers are sanMatcher of each of sans.
func sanMatchers(sans []string) []*tlsv3.SubjectAltNameMatcher {
	var out []*tlsv3.SubjectAltNameMatcher
	for _, s := range sans {
		out = append(out, sanMatcher(s))
	}
	return out
}

// fileSource is the data source of a file on the proxy.
func fileSource(path string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: path}}
}

// adsSecret references SDS secret name over ADS, with Envoy's default
// initial fetch timeout: the hub serves no secrets, so the cluster warms
// after that timeout without the secret, and its TLS handshakes fail
// (rather than keeping the whole sidecar from starting, as a wait without
// timeout would when the cluster is part of the first CDS response).
func adsSecret(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: adsConfigSource()}
}

// originationALPN is the ALPN an Envoy cluster originating TLS to a port
// of protocol p offers: "h2" for HTTP/2 and gRPC, "http/1.1" for HTTP,
// none otherwise.
func originationALPN(p model.Protocol) []string {
	switch {
	case isHTTP2(p):
		return []string{"h2"}
	case p == model.ProtocolHTTP:
		return []string{"http/1.1"}
	}
	return nil
}

// noSDSReason is the note of a credential that comes from SDS: the hub
// serves it under conditions (hub/xds secrets.go).
const noSDSReason = "served from the Secret of the proxy's namespace in its own cluster, to proxies on the authenticated port (15012) only: elsewhere the cluster warms after Envoy's initial fetch timeout (15 s) and its TLS handshakes fail"

// originationTLS is the transport socket of an Envoy cluster of host's
// port of protocol p originating TLS under t (mode SIMPLE or MUTUAL):
// envoy.transport_sockets.tls with an UpstreamTlsContext whose SNI is
// t.sni, else host; whose ALPN is originationALPN(p); with, for MUTUAL,
// the client certificate of clientCertificate and privateKey (files on
// the proxy), else the SDS secret of credentialName; and, unless
// insecureSkipVerify, a validation context of caCertificates (a file, with
// caCrl), else of the SDS secret of caCertCredentialName or
// credentialName, with subjectAltNames as exact SAN matchers (sanMatcher).
// Without any CA the server is not verified: upstream Envoy has no system
// trust store (system_root_certs, field 17 of CertificateValidationContext
// in go-control-plane envoy@v1.40.0
// extensions/transport_sockets/tls/v3/common.pb.go:1018, is
// "[#not-implemented-hide:]" there, i.e. for grpc-go only), and Envoy
// refuses SAN matchers without a trusted CA, so they are dropped. n gets
// a note for each such gap; an empty host skips the SNI default (notes
// only).
func originationTLS(t *networking.ClientTLSSettings, host model.Hostname, p model.Protocol, n notes) *corev3.TransportSocket {
	if s := t.GetSni(); len(s) > maxSNILength {
		n.at("sni").addf("longer than %d bytes, which Envoy refuses; the host is used", maxSNILength)
	}
	common := &tlsv3.CommonTlsContext{AlpnProtocols: originationALPN(p)}
	ctx := &tlsv3.UpstreamTlsContext{CommonTlsContext: common, Sni: tlsSNI(t, string(host))}
	if t.GetMode() == networking.ClientTLSSettings_MUTUAL {
		originationIdentity(common, t, n)
	} else {
		for _, f := range []struct {
			name string
			set  bool
		}{{"clientCertificate", t.GetClientCertificate() != ""}, {"privateKey", t.GetPrivateKey() != ""}} {
			if f.set {
				n.at(f.name).addf("ignored with mode SIMPLE")
			}
		}
	}
	originationValidation(common, t, n)
	return &corev3.TransportSocket{
		Name:       transportSocketTLS,
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)},
	}
}

// originationIdentity sets the client certificate of a MUTUAL origination
// under t: the files when both are set, else credentialName's SDS secret.
func originationIdentity(common *tlsv3.CommonTlsContext, t *networking.ClientTLSSettings, n notes) {
	cert, key, cred := t.GetClientCertificate(), t.GetPrivateKey(), t.GetCredentialName()
	switch {
	case cert != "" && key != "":
		common.TlsCertificates = []*tlsv3.TlsCertificate{{CertificateChain: fileSource(cert), PrivateKey: fileSource(key)}}
		if cred != "" {
			n.at("credentialName").addf("ignored: clientCertificate and privateKey are set")
		}
	case cred != "":
		common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{adsSecret(sdsSecretPrefix + cred)}
		n.at("credentialName").addf("%s", noSDSReason)
	default:
		n.at("mode").addf("MUTUAL without clientCertificate and privateKey (or credentialName); no client certificate is sent")
	}
}

// originationValidation sets the validation context of an origination
// under t (see originationTLS).
func originationValidation(common *tlsv3.CommonTlsContext, t *networking.ClientTLSSettings, n notes) {
	if t.GetInsecureSkipVerify().GetValue() {
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"caCertificates", t.GetCaCertificates() != ""},
			{"caCertCredentialName", t.GetCaCertCredentialName() != ""},
			{"caCrl", t.GetCaCrl() != ""},
			{"subjectAltNames", len(t.GetSubjectAltNames()) > 0},
		} {
			if f.set {
				n.at(f.name).addf("ignored: insecureSkipVerify")
			}
		}
		return
	}
	vc := &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sanMatchers(t.GetSubjectAltNames())}
	if crl := t.GetCaCrl(); crl != "" {
		vc.Crl = fileSource(crl)
	}
	cred := t.GetCredentialName()
	if t.GetMode() == networking.ClientTLSSettings_MUTUAL && t.GetClientCertificate() != "" && t.GetPrivateKey() != "" {
		cred = "" // ignored (originationIdentity)
	}
	switch {
	case t.GetCaCertificates() != "":
		vc.TrustedCa = fileSource(t.GetCaCertificates())
		common.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}
		if t.GetCaCertCredentialName() != "" {
			n.at("caCertCredentialName").addf("ignored: caCertificates is set")
		}
	case t.GetCaCertCredentialName() != "" || cred != "":
		name, field := sdsSecretPrefix+t.GetCaCertCredentialName(), "caCertCredentialName"
		if t.GetCaCertCredentialName() == "" {
			name, field = sdsSecretPrefix+cred+sdsCACertSuffix, "credentialName"
		}
		common.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         vc,
				ValidationContextSdsSecretConfig: adsSecret(name),
			},
		}
		if field == "caCertCredentialName" || t.GetMode() == networking.ClientTLSSettings_SIMPLE {
			n.at(field).addf("%s", noSDSReason)
		}
	default:
		n.at("caCertificates").addf("not set, and upstream Envoy has no system trust store: the server's certificate is not verified; set caCertificates to a CA bundle file of the proxy")
		if len(t.GetSubjectAltNames()) > 0 {
			n.at("subjectAltNames").addf("Envoy refuses SAN checks without caCertificates; dropped")
		}
		if t.GetCaCrl() != "" {
			n.at("caCrl").addf("no CA to check it against; dropped")
		}
	}
}

// tlsNotes says what the clusters of kind k leave out of tls settings t.
func tlsNotes(t *networking.ClientTLSSettings, k ProxyKind, n notes) {
	mode := t.GetMode()
	switch mode {
	case networking.ClientTLSSettings_DISABLE, networking.ClientTLSSettings_ISTIO_MUTUAL:
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"clientCertificate", t.GetClientCertificate() != ""},
			{"privateKey", t.GetPrivateKey() != ""},
			{"caCertificates", t.GetCaCertificates() != ""},
			{"credentialName", t.GetCredentialName() != ""},
			{"caCertCredentialName", t.GetCaCertCredentialName() != ""},
			{"caCrl", t.GetCaCrl() != ""},
			{"insecureSkipVerify", t.GetInsecureSkipVerify() != nil},
			{"sni", mode == networking.ClientTLSSettings_DISABLE && t.GetSni() != ""},
			{"subjectAltNames", mode == networking.ClientTLSSettings_DISABLE && len(t.GetSubjectAltNames()) > 0},
		} {
			if f.set {
				n.at(f.name).addf("ignored with mode %s", mode)
			}
		}
		if mode == networking.ClientTLSSettings_ISTIO_MUTUAL && t.GetSni() != "" {
			switch {
			case len(t.GetSni()) > maxSNILength:
				n.at("sni").addf("longer than %d bytes, which the proxy refuses; dropped", maxSNILength)
			case !k.Can().MTLSSNI.Can():
				// grpc-go's unmarshal_cds.go:373-380 reads SNI only with
				// the flag.
				n.at("sni").addf("%s", k.Can().MTLSSNI)
			}
		}
	case networking.ClientTLSSettings_SIMPLE, networking.ClientTLSSettings_MUTUAL:
		if lack := k.Can().OriginateTLS; !lack.Can() {
			n.at("mode").addf("%s: %s; auto mTLS applies", mode, lack)
			return
		}
		originationTLS(t, "", model.ProtocolHTTP2, n)
	default:
		n.at("mode").addf("%s is not supported; auto mTLS applies", mode)
	}
}
