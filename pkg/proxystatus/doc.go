// Package proxystatus holds the hub's view of what each proxy has been sent
// and has accepted, per xDS type, and renders it the way `istioctl
// proxy-status` does. It is pure: no I/O beyond the io.Writer it is handed,
// no goroutines, no clock.
//
// # Walk-through
//
// A hub replica's xDS server watches every response it sends and every
// request that ACKs or NACKs one (hub/xdsstatus.Tracker). For each proxy it
// keeps a Record: the proxy's node ID, its "<pod>.<ns>" name (xdsnode.ParseID),
// its cluster, the replica serving it, and one TypeStatus per xDS type keyed
// by short type ("cds", "lds", "eds", "rds", "ecds"). TypeStatus.Compute
// turns the sent and acknowledged nonces into Istio's four states:
//
//	NOT SENT  nothing of this type was sent yet
//	ERROR     the proxy NACKed, and has not ACKed anything since
//	SYNCED    the proxy ACKed the last response sent
//	STALE     a response is on its way or was not answered yet
//
// Replicas exchange their records; a Fleet merges them into one view in
// which a proxy that reconnected to another replica appears once, under its
// newest record. WriteTable, WriteDetail and WriteJSON print records for
// meshfedctl. Package proxystatus/csds maps records to and from the CSDS
// API (envoy.service.status.v3).
//
// Config rollouts (configstatus.go): each replica accounts for the Istio
// config it pushes in a ConfigLedger (every object's generation and the
// config epoch it arrived in), and each TypeStatus carries the epoch its
// ACKed version holds. Rollouts compares the two: per object, the proxies
// that hold its newest generation (SYNCED), those that do not yet (STALE)
// and those that rejected a response holding it (NACKED), by cluster and
// replica. It is the document of /debug/configstatusz and
// `meshfedctl config-status`.
//
// # JSON
//
// Record and TypeStatus marshal with encoding/json; WriteJSON writes
//
//	{
//	  "proxies": [
//	    {
//	      "proxy": "sidecar~10.0.0.1~client.demo~demo.svc.cluster.local",
//	      "name": "client.demo",
//	      "cluster": "cluster-1",
//	      "replica": "hub-0",
//	      "types": {
//	        "cds": {"typeUrl": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
//	                "status": "SYNCED", "sent": "3", "sentNonce": "7",
//	                "acked": "3", "ackedNonce": "7",
//	                "sentAt": "…", "ackedAt": "…"},
//	        "eds": {"typeUrl": "…", "status": "ERROR", "sent": "4", "sentNonce": "9",
//	                "acked": "3", "ackedNonce": "8",
//	                "nack": "duplicate endpoint", "nackVersion": "4", …}
//	      },
//	      "connected": "2026-01-02T03:04:05Z",
//	      "lastChange": "2026-01-02T03:04:06Z",
//	      "version": "1.85.0"
//	    }
//	  ]
//	}
//
// Proxies are sorted by name, then cluster, then node ID. Empty strings and
// zero times are left out. "types" holds only the types the proxy
// subscribed to; a table shows the others as NOT SENT. "status" is always
// present and is what Compute returns.
package proxystatus
