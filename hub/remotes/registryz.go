package remotes

import (
	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
)

// Registryz returns the document of /debug/registryz (debugdoc.Registryz):
// every remote cluster with its state here, what the store holds of it, the
// rejected secrets, and the merged services.
func Registryz(replica string, st *store.Store, status *Status) debugdoc.Registryz {
	out := debugdoc.Registryz{Replica: replica}
	for _, e := range status.SecretErrors() {
		out.SecretErrors = append(out.SecretErrors, debugdoc.SecretError{Secret: e.Secret, Error: e.Error})
	}
	summaries := map[model.ClusterID]store.ClusterSummary{}
	for _, s := range st.Clusters() {
		summaries[s.ID] = s
	}
	now := status.Now()
	for _, c := range status.Clusters() {
		s := summaries[c.ID]
		out.Clusters = append(out.Clusters, debugdoc.RegistryzCluster{
			ID: c.ID, Secret: c.Secret, State: debugdoc.ClusterState(c.Effective(now)), Error: c.Error,
			Generation: s.Version.Term, Services: s.Services, Endpoints: s.Endpoints,
			CredentialExpiry: c.CredentialExpiry, Since: c.Since,
			StalePolicy: c.StalePolicy.String(), EndpointsDropped: c.Dropped,
			DiscoverySelector: c.Scope.String(), Network: s.Network,
		})
	}
	for _, ms := range st.Services() {
		out.Services = append(out.Services, debugdoc.RegistryzService{
			Hostname: ms.Service.Hostname, Ports: ms.Service.Ports, Endpoints: ms.Endpoints,
		})
	}
	if nets := st.NetworkGateways(); len(nets.Networks) > 0 {
		out.Networks = nets
	}
	return out
}
