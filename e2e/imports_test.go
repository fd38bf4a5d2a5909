package e2e

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/meshfed/meshfed"

// allowed lists, per top-level room, the rooms its packages may import. The
// rule of DESIGN.md: pkg is a leaf, federation and spoke build on pkg, hub on
// federation and pkg, and only e2e may import everything.
var allowed = map[string][]string{
	"pkg":        {"pkg"},
	"federation": {"federation", "pkg"},
	"spoke":      {"spoke", "pkg"},
	"hub":        {"hub", "federation", "pkg"},
	"e2e":        {"e2e", "hub", "spoke", "federation", "pkg"},
}

// contracts are the packages that declare a wire contract once for every
// room (pkg/xdsnode: the xDS node; pkg/debugdoc: the /debug documents):
// pure, they import only these packages of the module.
var contracts = map[string][]string{
	module + "/pkg/xdsnode":  {module + "/pkg/model", module + "/pkg/agent"},
	module + "/pkg/debugdoc": {module + "/pkg/model", module + "/pkg/pki"},
	module + "/pkg/testutil": {},
}

// within narrows, for some packages, the packages of the module they may
// import (outside their tests) to those under these prefixes. Fleet status
// is replicated state joined from local parts it reads through small
// interfaces (xdsstatus.Tracker, trustsvc.Service): it imports no other
// package of the hub.
//
// The stream layer (hub/xds/ads) serves ADS from any go-control-plane
// cache: it imports nothing of the module, so that it can be proven
// against go-control-plane's own stream server on the same caches.
//
// The xDS status (hub/xds/xdsstatus: the tracker, the config ledger, CSDS
// and istioctl's debug types) stands apart from the caches: it observes
// their versions and the streams, and imports no cache or planner.
var within = map[string][]string{
	module + "/hub/fleetstatus":   {module + "/federation", module + "/pkg/", module + "/hub/fleetstatus/fleetpb"},
	module + "/hub/xds/ads":       {},
	module + "/hub/xds/xdsstatus": {module + "/pkg/proxystatus", module + "/pkg/version", module + "/pkg/istioconfig", module + "/pkg/xdsnode", module + "/hub/xds/ads"},
}

// apart lists, for some packages, the prefixes of the module they must not
// import (outside their tests). The xDS server keeps its own per-stream
// status and answers CSDS from a StatusSource: it knows nothing of
// replication, the replicas or the fleet view built from them.
var apart = map[string][]string{
	module + "/hub/xds": {module + "/federation", module + "/hub/replication", module + "/hub/fleetstatus"},
}

// testOnly are packages only tests may import: a _test.go file anywhere,
// or any package under e2e/ (the fleet framework and demo are test code).
var testOnly = []string{module + "/pkg/testutil"}

// ioPackages are what a pure core must not import: the network, the file
// system, the Kubernetes clients, the gossip and the peer stream. The pure
// cores (federation's state merge and wire types, the model, xDS
// generation) return what to do; their shells do it.
var ioPackages = []string{
	"net/http", "os", "os/exec", "google.golang.org/grpc", "github.com/hashicorp/memberlist",
	"k8s.io/client-go", "sigs.k8s.io/controller-runtime", "sigs.k8s.io/multicluster-runtime",
	module + "/federation/gossip", module + "/federation/peerstream",
}

var pureCores = []string{module + "/federation", module + "/pkg/model", module + "/pkg/xdsgen"}

func room(importPath string) string {
	rest := strings.TrimPrefix(strings.TrimPrefix(importPath, module), "/")
	r, _, _ := strings.Cut(rest, "/")
	return r
}

func TestImportRules(t *testing.T) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports", module+"/...")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(out)
	checked := 0
	for {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		from := room(p.ImportPath)
		ok, known := allowed[from]
		if !known {
			t.Errorf("package %s is outside the fixed layout (pkg, federation, spoke, hub, e2e)", p.ImportPath)
			continue
		}
		for _, imp := range append(append(p.Imports, p.TestImports...), p.XTestImports...) {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to := room(imp)
			if !contains(ok, to) {
				t.Errorf("%s imports %s: %s/ may import only %v", p.ImportPath, imp, from, ok)
			}
		}
		if only, isContract := contracts[p.ImportPath]; isContract {
			for _, imp := range p.Imports {
				if strings.HasPrefix(imp, module+"/") && !contains(only, imp) {
					t.Errorf("%s imports %s: it may import only %v of the module", p.ImportPath, imp, only)
				}
			}
		}
		if prefixes, narrowed := within[p.ImportPath]; narrowed {
			for _, imp := range p.Imports {
				if strings.HasPrefix(imp, module+"/") && !hasPrefix(imp, prefixes) {
					t.Errorf("%s imports %s: it may import only %v of the module", p.ImportPath, imp, prefixes)
				}
			}
		}
		for _, imp := range p.Imports {
			if hasPrefix(imp, apart[p.ImportPath]) {
				t.Errorf("%s imports %s: it must not import %v", p.ImportPath, imp, apart[p.ImportPath])
			}
		}
		if contains(pureCores, p.ImportPath) {
			for _, imp := range p.Imports {
				for _, io := range ioPackages {
					if imp == io || strings.HasPrefix(imp, io+"/") {
						t.Errorf("%s imports %s: a pure core imports no I/O package (%v)", p.ImportPath, imp, ioPackages)
					}
				}
			}
		}
		if from != "e2e" {
			for _, imp := range p.Imports {
				if contains(testOnly, imp) {
					t.Errorf("%s imports %s outside its tests: only tests and e2e/ may", p.ImportPath, imp)
				}
			}
		}
		checked++
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if checked < 5 {
		t.Fatalf("checked only %d packages; go list found too little", checked)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// hasPrefix reports whether path is the package of one of prefixes or a
// package under it.
func hasPrefix(path string, prefixes []string) bool {
	for _, p := range prefixes {
		if path == strings.TrimSuffix(p, "/") || strings.HasPrefix(path, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}
