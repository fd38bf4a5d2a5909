package debugdoc

import "github.com/meshfed/meshfed/pkg/model"

// Explainz is the document of /debug/explainz?proxy=P&host=H[:PORT][&subset=S]:
// the endpoints proxy P (a node ID or "<pod>.<ns>", served by any replica)
// is sent for service H, in priority order, with each one's reason.
type Explainz struct {
	// Replica is the answering hub's replica ID.
	Replica string `json:"replica"`
	// Proxy is the node ID of the proxy explained.
	Proxy string `json:"proxy"`
	// Cluster and Locality ("<region>/<zone>/<subzone>") are the proxy's,
	// as its status record says.
	Cluster  string `json:"cluster"`
	Locality string `json:"locality,omitempty"`
	// Network is the network the proxy is on (its NETWORK metadata, else
	// its cluster's); empty when unknown.
	Network string `json:"network,omitempty"`
	// ServedBy is the replica that serves the proxy.
	ServedBy string `json:"servedBy"`
	// Host and Port name the service port explained; Port is the service's
	// first port when the query named none.
	Host   string `json:"host"`
	Port   uint32 `json:"port"`
	Subset string `json:"subset,omitempty"`
	// Error says why there is no explanation (an unknown proxy, host, port
	// or subset); the fields below are then empty.
	Error string `json:"error,omitempty"`
	// Assignment is the load assignment (EDS resource) explained.
	Assignment string `json:"assignment,omitempty"`
	// Endpoints are those sent, in the assignment's order (priority, then
	// locality, then address), then those of the service left out.
	Endpoints []ExplainedEndpoint `json:"endpoints,omitempty"`
}

// ExplainedEndpoint is one endpoint of Explainz, as xdsgen.ExplainEndpoints
// explains it.
type ExplainedEndpoint struct {
	// Address is "<ip>:<target port>", or the IP alone when the endpoint
	// does not serve the port.
	Address  string          `json:"address"`
	Cluster  model.ClusterID `json:"cluster"`
	Locality model.Locality  `json:"locality"`
	Pod      string          `json:"pod,omitempty"`
	// Network is the endpoint's network; for a gateway, the network it
	// leads into.
	Network string `json:"network,omitempty"`
	// Gateway: the address is a gateway of Network standing for its
	// endpoints, not an endpoint of the service.
	Gateway bool `json:"gateway,omitempty"`
	// Weight is its load-balancing weight within its locality (1 for an
	// endpoint; a gateway weighs as many as it stands for).
	Weight uint32 `json:"weight,omitempty"`
	// Sent: the proxy is sent the endpoint.
	Sent bool `json:"sent"`
	// Priority is its priority, 0 best; -1 when not sent.
	Priority int `json:"priority"`
	// LocalityWeight is its locality's weight within its priority.
	LocalityWeight uint32 `json:"localityWeight,omitempty"`
	// Reason says why it has its priority, or why it is left out.
	Reason string `json:"reason"`
}
