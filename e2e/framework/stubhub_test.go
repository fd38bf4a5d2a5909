package framework

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshfed/meshfed/pkg/debugdoc"
)

// The framework's own tests cannot use the real hub (it is built elsewhere
// and may not exist yet), so they check the process plumbing of StartHub
// against this test binary re-executed as a stand-in: it checks the flags
// the framework passes and serves the monitoring endpoints with fixed
// content in the documented schema. It is no substitute for the hub in any
// end-to-end scenario.
const stubHubEnv = "MESHFED_FRAMEWORK_STUB_HUB"

func TestMain(m *testing.M) {
	if os.Getenv(stubHubEnv) == "1" {
		os.Exit(runStubHub(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// stubRegistryz is the example document of the registryz schema, with the
// replica ID filled in.
const stubRegistryz = `{"replica":%q,
 "clusters":[{"id":"cluster-1","secret":"istio-system/remote-a","state":"synced","error":"","generation":3,"services":1,"endpoints":2}],
 "secretErrors":[{"secret":"istio-system/bad","error":"no clusters"}],
 "services":[{"hostname":"echo.demo.svc.cluster.local","ports":[{"name":"grpc","port":8080,"protocol":"GRPC"}],
   "endpoints":[{"cluster":"cluster-1","address":"127.0.10.1","locality":{"region":"r1","zone":"z1"},"ready":true,"serviceAccount":"echo","pod":"echo-0","ports":{"grpc":18080}}]}]}`

func runStubHub(args []string) int {
	fs := flag.NewFlagSet("stub-hub", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "")
	namespace := fs.String("namespace", "", "")
	xdsAddr := fs.String("xds-addr", "", "")
	monAddr := fs.String("monitoring-addr", "", "")
	replica := fs.String("replica-id", "", "")
	extra := fs.String("extra", "", "")
	gossipAddr := fs.String("gossip-addr", "", "")
	peerAddr := fs.String("peer-addr", "", "")
	caAddr := fs.String("ca-addr", "", "")
	xdsSAN := fs.String("xds-san", "", "")
	debugAuth := fs.Bool("debug-auth", true, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "stub hub:", err)
		return 2
	}
	if *debugAuth {
		return fail(errors.New("the framework left the monitoring port's authentication on (--debug-auth), which its tests do not send tokens to"))
	}
	if _, err := clientcmd.LoadFromFile(*kubeconfig); err != nil {
		return fail(err)
	}
	if *namespace != RemoteSecretNamespace {
		return fail(fmt.Errorf("namespace %q", *namespace))
	}
	if *gossipAddr == "" || *peerAddr == "" {
		return fail(fmt.Errorf("federation addresses not passed: gossip %q peer %q", *gossipAddr, *peerAddr))
	}
	if host, _, _ := net.SplitHostPort(*caAddr); host == "" || *xdsSAN != host {
		return fail(fmt.Errorf("--xds-san %q does not name the host of --ca-addr %q, which clients dial", *xdsSAN, *caAddr))
	}
	if *xdsAddr != "" { // HubOptions.PlaintextXDS
		xl, err := net.Listen("tcp", *xdsAddr)
		if err != nil {
			return fail(err)
		}
		defer xl.Close()
	}
	ml, err := net.Listen("tcp", *monAddr)
	if err != nil {
		return fail(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE meshfed_stub_info gauge\nmeshfed_stub_info{replica=%q} 1\n", *replica)
	})
	mux.HandleFunc(debugdoc.RegistryzPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, stubRegistryz, *replica)
	})
	srv := &http.Server{Handler: mux}
	go func() {
		if err := srv.Serve(ml); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "stub hub:", err)
		}
	}()
	fmt.Fprintf(os.Stderr, "stub hub %s: xds %s monitoring %s extra=%s\n", *replica, *xdsAddr, *monAddr, *extra)
	fmt.Fprint(os.Stdout, "partial line without newline")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	s := <-sig
	fmt.Fprintf(os.Stderr, "\nstub hub %s: %s, exiting\n", *replica, strings.ToUpper(s.String()))
	_ = srv.Close()
	return 0
}
