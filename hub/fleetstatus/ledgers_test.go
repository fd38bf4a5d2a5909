package fleetstatus

import (
	"testing"

	"github.com/meshfed/meshfed/hub/xds/xdsstatus"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/proxystatus"
)

// The xDS server's ledger is a Config.
var _ Config = (*xdsstatus.Ledger)(nil)

// localConfig is a replica's config ledger as Fleet reads it.
type localConfig struct {
	ledger  proxystatus.ConfigLedger
	changed chan struct{}
}

func (l *localConfig) ConfigLedger() proxystatus.ConfigLedger { return l.ledger }
func (l *localConfig) Epochs() (uint64, uint64)               { return l.ledger.Epoch, l.ledger.Pending }
func (l *localConfig) Changed() <-chan struct{}               { return l.changed }

// A replica's config ledger reaches its peers in the full batch and again
// only when it changed; the peer answers config status with it, and
// forgets it with the replica.
func TestFleetReplicatesLedger(t *testing.T) {
	vs := proxystatus.ConfigObject{Kind: "VirtualService", Namespace: "demo", Name: "echo", Generation: 2, Epoch: 3}
	cfg := &localConfig{ledger: proxystatus.ConfigLedger{Replica: "ignored", Epoch: 3, Pending: 3, Objects: []proxystatus.ConfigObject{vs}},
		changed: make(chan struct{}, 1)}
	a := New(Options{Self: "hub-0", Proxies: xdsstatus.NewTracker("hub-0", nil, nil), Config: cfg})
	b := New(Options{Self: "hub-1", Proxies: xdsstatus.NewTracker("hub-1", nil, nil)})

	raw := a.Full()
	if raw == nil {
		t.Fatal("no full batch from a replica with a ledger")
	}
	if _, ok := take(t, a); ok {
		t.Fatal("a batch after the full one, with nothing changed")
	}
	if err := b.Apply("hub-0", raw); err != nil {
		t.Fatal(err)
	}
	doc := b.ConfigStatus(proxystatus.RolloutQuery{}, debugdoc.Configz{})
	if len(doc.Replicas) != 1 || doc.Replicas[0] != (proxystatus.ReplicaEpoch{Replica: "hub-0", Epoch: 3, Objects: 1}) {
		t.Fatalf("replicas %+v", doc.Replicas)
	}
	if len(doc.Objects) != 1 || doc.Objects[0].Generation != 2 {
		t.Fatalf("objects %+v", doc.Objects)
	}

	// The next generation begins an epoch: the ledger travels again.
	vs.Generation, vs.Epoch = 3, 4
	cfg.ledger = proxystatus.ConfigLedger{Epoch: 3, Pending: 4, Objects: []proxystatus.ConfigObject{vs}}
	raw, ok := take(t, a)
	if !ok {
		t.Fatal("no batch for a changed ledger")
	}
	if err := b.Apply("hub-0", raw); err != nil {
		t.Fatal(err)
	}
	if o := b.ConfigStatus(proxystatus.RolloutQuery{}, debugdoc.Configz{}).Objects; len(o) != 1 || o[0].Generation != 3 {
		t.Fatalf("after the change: %+v", o)
	}
	// Its own view includes its ledger, under its own name.
	if r := a.ConfigStatus(proxystatus.RolloutQuery{}, debugdoc.Configz{}).Replicas; len(r) != 1 || r[0].Replica != "hub-0" || r[0].Epoch != 3 {
		t.Fatalf("own view: %+v", r)
	}
	b.DropReplica("hub-0")
	if doc := b.ConfigStatus(proxystatus.RolloutQuery{}, debugdoc.Configz{}); len(doc.Objects) != 0 || len(doc.Replicas) != 0 {
		t.Fatalf("after the replica left: %+v", doc)
	}
}

// An object this replica refuses says so in the config status, with its
// generation and reason: beside its rollout when a replica applied an
// older generation, and alone when none ever applied it and it is asked
// for by name.
func TestConfigStatusSaysWhatIsRefused(t *testing.T) {
	vs := proxystatus.ConfigObject{Kind: "VirtualService", Namespace: "demo", Name: "echo", Generation: 2, Epoch: 3}
	cfg := &localConfig{ledger: proxystatus.ConfigLedger{Epoch: 3, Pending: 3, Objects: []proxystatus.ConfigObject{vs}},
		changed: make(chan struct{}, 1)}
	f := New(Options{Self: "hub-0", Proxies: xdsstatus.NewTracker("hub-0", nil, nil), Config: cfg})
	configz := debugdoc.Configz{Objects: []debugdoc.ConfigzObject{
		{Kind: "VirtualService", Namespace: "demo", Name: "echo", Generation: 3, State: debugdoc.ConfigRejected, Reason: "no hosts"},
		{Kind: "DestinationRule", Namespace: "demo", Name: "new", Generation: 1, State: debugdoc.ConfigRejected, Reason: "bad subset"},
	}}
	doc := f.ConfigStatus(proxystatus.RolloutQuery{}, configz)
	if len(doc.Objects) != 1 || doc.Objects[0].Rejected != "generation 3 is refused (no hosts)" {
		t.Errorf("rollouts %+v: want echo's, saying generation 3 is refused", doc.Objects)
	}
	doc = f.ConfigStatus(proxystatus.RolloutQuery{Kind: "DestinationRule", Namespace: "demo", Name: "new"}, configz)
	if len(doc.Objects) != 1 || doc.Objects[0].Name != "new" || doc.Objects[0].Rejected != "generation 1 is refused (bad subset)" {
		t.Errorf("asked for the refused DestinationRule: %+v", doc.Objects)
	}
	if doc := f.ConfigStatus(proxystatus.RolloutQuery{Kind: "DestinationRule", Namespace: "demo", Name: "other"}, configz); len(doc.Objects) != 0 {
		t.Errorf("an object nobody knows: %+v", doc.Objects)
	}
}
