package agent

import "testing"

func TestHostOf(t *testing.T) {
	for in, want := range map[string]string{
		"ca.example:15012":                 "ca.example",
		"127.0.0.1:15012":                  "127.0.0.1",
		"[::1]:15012":                      "::1",
		"dns:///ca.example:15012":          "ca.example",
		"dns://8.8.8.8/ca.example:15012":   "ca.example",
		"passthrough:///10.0.0.1:15012":    "10.0.0.1",
		"ca.example":                       "ca.example",
		"dns:///ca.istio-system.svc:15012": "ca.istio-system.svc",
	} {
		if got := hostOf(in); got != want {
			t.Errorf("hostOf(%q) = %q, want %q", in, got, want)
		}
	}
}
