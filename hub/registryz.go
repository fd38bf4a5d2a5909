package hub

import (
	"time"

	"github.com/meshfed/meshfed/hub/remotes"
	"github.com/meshfed/meshfed/hub/store"
	"github.com/meshfed/meshfed/pkg/model"
)

// Registryz is the JSON document of /debug/registryz: every remote cluster
// with its state, the rejected secrets, and the merged services.
type Registryz struct {
	Replica      string                `json:"replica"`
	Clusters     []RegistryzCluster    `json:"clusters"`
	SecretErrors []remotes.SecretError `json:"secretErrors"`
	Services     []RegistryzService    `json:"services"`
}

// RegistryzCluster is one remote cluster in /debug/registryz.
type RegistryzCluster struct {
	ID         model.ClusterID  `json:"id"`
	Secret     string           `json:"secret"`
	State      remotes.State    `json:"state"`
	Error      string           `json:"error"`
	Generation model.Generation `json:"generation"`
	// CredentialExpiry is when the remote secret's token expires, if known.
	CredentialExpiry time.Time `json:"credentialExpiry,omitzero"`
	Services         int       `json:"services"`
	Endpoints        int       `json:"endpoints"`
}

// RegistryzService is one merged service in /debug/registryz.
type RegistryzService struct {
	Hostname  model.Hostname      `json:"hostname"`
	Ports     []model.ServicePort `json:"ports"`
	Endpoints []model.Endpoint    `json:"endpoints"`
}

func registryz(replica string, st *store.Store, status *remotes.Status) Registryz {
	out := Registryz{Replica: replica, SecretErrors: status.SecretErrors()}
	summaries := map[model.ClusterID]model.ClusterSummary{}
	for _, s := range st.Clusters() {
		summaries[s.ID] = s
	}
	now := status.Now()
	for _, c := range status.Clusters() {
		s := summaries[c.ID]
		out.Clusters = append(out.Clusters, RegistryzCluster{
			ID: c.ID, Secret: c.Secret, State: c.Effective(now), Error: c.Error,
			Generation: s.Generation, Services: s.Services, Endpoints: s.Endpoints,
			CredentialExpiry: c.CredentialExpiry,
		})
	}
	for _, ms := range st.Services() {
		out.Services = append(out.Services, RegistryzService{
			Hostname: ms.Service.Hostname, Ports: ms.Service.Ports, Endpoints: ms.Endpoints,
		})
	}
	return out
}
