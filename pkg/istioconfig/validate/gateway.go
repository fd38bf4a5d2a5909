package validate

import (
	"cmp"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Gateway checks a Gateway spec, as istiod's validation does for what the
// hub applies: at least one server; each with a port (number, protocol,
// name), hosts "[<namespace>/]<host>", and TLS settings that fit its
// protocol. Paths start at "spec".
func Gateway(gw *networking.Gateway) ErrorList {
	var e errs
	spec := field.NewPath("spec")
	if len(gw.GetServers()) == 0 {
		e.required(spec.Child("servers"))
	}
	checkLabels(&e, spec.Child("selector"), gw.GetSelector())
	names := map[string]int{}
	for i, srv := range gw.GetServers() {
		p := spec.Child("servers").Index(i)
		checkServer(&e, p, srv)
		if n := srv.GetPort().GetName(); n != "" {
			if j, dup := names[n]; dup {
				e.add(p.Child("port", "name"), "%q is also the name of servers[%d]'s port", n, j)
			}
			names[n] = i
		}
	}
	return e.list
}

func checkServer(e *errs, p *field.Path, srv *networking.Server) {
	port := srv.GetPort()
	if port == nil {
		e.required(p.Child("port"))
	} else {
		checkPort(e, p.Child("port", "number"), port.GetNumber())
		switch {
		case port.GetProtocol() == "":
			e.required(p.Child("port", "protocol"))
		default:
			checkProtocol(e, p.Child("port", "protocol"), port.GetProtocol())
		}
		if port.GetName() == "" {
			e.required(p.Child("port", "name"))
		}
	}
	if len(srv.GetHosts()) == 0 {
		e.required(p.Child("hosts"))
	}
	for i, h := range srv.GetHosts() {
		hp := p.Child("hosts").Index(i)
		ns, host, scoped := strings.Cut(h, "/")
		if !scoped {
			host = h
		} else if ns != "*" && ns != "." && len(validation.IsDNS1123Label(ns)) != 0 {
			e.add(hp, "%q: namespace %q must be \"*\", \".\" or a namespace name", h, ns)
		}
		if msg := checkWildcardHost(host); msg != "" {
			e.add(hp, "%q: %s", h, msg)
		}
	}
	checkServerTLS(e, p.Child("tls"), srv)
}

// checkServerTLS checks a server's tls against its protocol: HTTPS and
// TLS servers need a mode; SIMPLE and MUTUAL need a credential (a
// credentialName, or certificate files); a plain HTTP server may only
// redirect to HTTPS.
func checkServerTLS(e *errs, p *field.Path, srv *networking.Server) {
	tls := srv.GetTls()
	proto := strings.ToUpper(srv.GetPort().GetProtocol())
	secure := proto == "HTTPS" || proto == "TLS"
	if tls == nil {
		if secure {
			e.add(p, "required for a %s server", proto)
		}
		return
	}
	if !secure {
		if tls.GetMode() != networking.ServerTLSSettings_PASSTHROUGH || tls.GetCredentialName() != "" ||
			tls.GetServerCertificate() != "" {
			e.add(p, "a %s server takes only httpsRedirect", cmp.Or(proto, "plaintext"))
		}
		return
	}
	switch tls.GetMode() {
	case networking.ServerTLSSettings_SIMPLE, networking.ServerTLSSettings_MUTUAL, networking.ServerTLSSettings_OPTIONAL_MUTUAL:
		if tls.GetCredentialName() == "" && (tls.GetServerCertificate() == "" || tls.GetPrivateKey() == "") {
			e.add(p, "mode %s needs credentialName (or serverCertificate and privateKey)", tls.GetMode())
		}
		if n := tls.GetCredentialName(); n != "" && !secretRef(n) {
			e.add(p.Child("credentialName"), "%q is not a Secret name (or <namespace>/<name>)", n)
		}
	}
}

// secretRef reports whether s names a Secret: "<name>", or
// "<namespace>/<name>" (which only a proxy of that namespace may read).
func secretRef(s string) bool {
	ns, name, scoped := strings.Cut(s, "/")
	if !scoped {
		name = s
	} else if len(validation.IsDNS1123Label(ns)) != 0 {
		return false
	}
	return len(validation.IsDNS1123Subdomain(name)) == 0
}
