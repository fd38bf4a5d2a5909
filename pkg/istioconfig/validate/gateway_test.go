package validate_test

import (
	"testing"

	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
)

func TestGateway(t *testing.T) {
	runCases(t, validate.KindGateway, []specCase{
		{name: "http and https", spec: `
selector: {istio: ingressgateway}
servers:
- port: {number: 80, name: http, protocol: HTTP}
  hosts: ["*/echo.example.com", "./local.example.com", "demo/*.example.com"]
  tls: {httpsRedirect: true}
- port: {number: 443, name: https, protocol: HTTPS}
  hosts: ["echo.example.com"]
  tls: {mode: SIMPLE, credentialName: echo-cert}
- port: {number: 443, name: tls, protocol: TLS}
  hosts: ["pass.example.com"]
  tls: {mode: PASSTHROUGH}`},
		{name: "no servers", spec: `selector: {istio: x}`, want: []string{"spec.servers: required"}},
		{name: "server fields", spec: `
servers:
- hosts: []
- port: {number: 0, name: a, protocol: HTTP}
  hosts: ["bad/ns/x", "ns_/x", "*.*.x"]
- port: {number: 80, name: a, protocol: FTP}
  hosts: ["*"]`, want: []string{
			"spec.servers[0].port: required",
			"spec.servers[0].hosts: required",
			"spec.servers[1].port.number: must be between 1 and 65535, got 0",
			`spec.servers[1].hosts[0]: "bad/ns/x": label "ns/x" is not a DNS label (letters, digits, '-')`,
			`spec.servers[1].hosts[1]: "ns_/x": namespace "ns_" must be "*", "." or a namespace name`,
			`spec.servers[1].hosts[2]: "*.*.x": label "*" is not a DNS label (letters, digits, '-')`,
			`spec.servers[2].port.protocol: unknown protocol "FTP"`,
			`spec.servers[2].port.name: "a" is also the name of servers[1]'s port`,
		}},
		{name: "tls", spec: `
servers:
- port: {number: 443, name: a, protocol: HTTPS}
  hosts: ["*"]
- port: {number: 444, name: b, protocol: HTTPS}
  hosts: ["*"]
  tls: {mode: MUTUAL}
- port: {number: 80, name: c, protocol: HTTP}
  hosts: ["*"]
  tls: {mode: SIMPLE, credentialName: x}
- port: {number: 445, name: d, protocol: TLS}
  hosts: ["*"]
  tls: {mode: SIMPLE, credentialName: Not_A_Name}`, want: []string{
			"spec.servers[0].tls: required for a HTTPS server",
			"spec.servers[1].tls: mode MUTUAL needs credentialName (or serverCertificate and privateKey)",
			"spec.servers[2].tls: a HTTP server takes only httpsRedirect",
			`spec.servers[3].tls.credentialName: "Not_A_Name" is not a Secret name (or <namespace>/<name>)`,
		}},
	})
}
