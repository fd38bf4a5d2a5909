package remotes

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/meshfed/meshfed/pkg/model"
)

// State is the sync state of a remote cluster.
type State string

// The states a remote cluster goes through.
const (
	// StateInvalid: its remote secret entry could not be used.
	StateInvalid State = "invalid"
	// StateSyncing: its informers are listing.
	StateSyncing State = "syncing"
	// StateSynced: its state is published and kept current.
	StateSynced State = "synced"
	// StateUnreachable: listing or watching its apiserver fails.
	StateUnreachable State = "unreachable"
	// StateTimeout: its apiserver answers but listing has not finished
	// within the sync timeout.
	StateTimeout State = "timeout"
	// StateReplicated: another replica owns it; its state arrives from
	// that replica.
	StateReplicated State = "replicated"
	// StateCredentialExpiring: served, but the token of its remote secret
	// expires soon (see Status.ExpiryWarning); rotate the secret.
	StateCredentialExpiring State = "credential-expiring"
)

var allStates = []State{StateInvalid, StateSyncing, StateSynced, StateUnreachable, StateTimeout, StateReplicated, StateCredentialExpiring}

// ClusterStatus is what the hub knows of one remote cluster's connection.
type ClusterStatus struct {
	ID     model.ClusterID `json:"id"`
	Secret string          `json:"secret"`
	State  State           `json:"state"`
	Error  string          `json:"error,omitempty"`
	Since  time.Time       `json:"since"`
	// CredentialExpiry is when the remote secret's token expires, if known.
	CredentialExpiry time.Time `json:"credentialExpiry,omitzero"`
	// StalePolicy is what becomes of the cluster's endpoints while it is
	// unreachable (the remote secret's AnnotationStaleEndpoints).
	StalePolicy StalePolicy `json:"stalePolicy"`
	// Dropped is when its endpoints were dropped under StalePolicy; zero
	// while they are served.
	Dropped time.Time `json:"endpointsDropped,omitzero"`
	// Scope narrows what is discovered in it (the remote secret's
	// AnnotationDiscoverySelector).
	Scope Scope `json:"discoverySelector,omitzero"`
}

// ExpiryWarning is how long before its token expires a healthy cluster is
// reported credential-expiring: a day leaves time to rotate the secret.
const ExpiryWarning = 24 * time.Hour

// Effective returns the state to report now: a healthy cluster whose
// credentials expire within ExpiryWarning is credential-expiring.
func (c ClusterStatus) Effective(now time.Time) State {
	healthy := c.State == StateSynced || c.State == StateReplicated
	if healthy && !c.CredentialExpiry.IsZero() && c.CredentialExpiry.Sub(now) < ExpiryWarning {
		return StateCredentialExpiring
	}
	return c.State
}

// Error reasons counted in meshfed_remote_cluster_errors_total.
const (
	ReasonInvalidKubeconfig = "invalid_kubeconfig"
	ReasonInvalidClusterID  = "invalid_cluster_id"
	ReasonDuplicateCluster  = "duplicate_cluster"
	ReasonNoClusters        = "no_clusters"
	ReasonWatchError        = "watch_error"
	ReasonUnreachable       = "unreachable"
	ReasonClientError       = "client_error"
	ReasonStalePolicy       = "invalid_stale_policy"
	ReasonDiscoverySelector = "invalid_discovery_selector"
	ReasonEndpointsDropped  = "endpoints_dropped"
)

// Status tracks every remote cluster and every rejected secret. It is safe
// for concurrent use and is a prometheus.Collector for the per-state gauge.
type Status struct {
	clock clock.PassiveClock

	mu           sync.Mutex // guards clusters and secretErrors
	clusters     map[model.ClusterID]*ClusterStatus
	secretErrors map[string]string

	errors     *prometheus.CounterVec
	reconnects *prometheus.CounterVec
	// configReconnects counts the remote-secret cache rebuilt after the
	// config cluster's return.
	configReconnects prometheus.Counter
	statesDesc       *prometheus.Desc
}

// NewStatus returns an empty Status whose metrics are registered on reg.
func NewStatus(clk clock.PassiveClock, reg prometheus.Registerer) *Status {
	s := &Status{
		clock:        clk,
		clusters:     map[model.ClusterID]*ClusterStatus{},
		secretErrors: map[string]string{},
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_remote_cluster_errors_total",
			Help: "Errors met with remote clusters and remote secrets, by cluster (or secret) and reason.",
		}, []string{"cluster", "reason"}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_remote_cluster_reconnects_total",
			Help: "Remote clusters whose client and watches were built anew when their apiserver answered again after an outage, by cluster.",
		}, []string{"cluster"}),
		statesDesc: prometheus.NewDesc("meshfed_remote_clusters",
			"Remote clusters known to this hub replica, by sync state.", []string{"state"}, nil),
	}
	s.configReconnects = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "meshfed_config_cluster_reconnects_total",
		Help: "Times the config cluster's apiserver answered a probe again after failing one, and the remote secrets were listed anew.",
	})
	reg.MustRegister(s.errors, s.reconnects, s.configReconnects, s)
	return s
}

// Describe implements prometheus.Collector.
func (s *Status) Describe(ch chan<- *prometheus.Desc) { ch <- s.statesDesc }

// Collect implements prometheus.Collector.
func (s *Status) Collect(ch chan<- prometheus.Metric) {
	counts := map[State]int{}
	now := s.clock.Now()
	s.mu.Lock()
	for _, c := range s.clusters {
		counts[c.Effective(now)]++
	}
	s.mu.Unlock()
	for _, st := range allStates {
		ch <- prometheus.MustNewConstMetric(s.statesDesc, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
}

// Set records cluster id's state. An empty errMsg clears the last error only
// when the state is healthy (syncing or synced). With an empty secret, Set
// only updates a cluster that is already known, so a late report about a
// removed cluster cannot bring its entry back.
func (s *Status) Set(id model.ClusterID, secret string, st State, errMsg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clusters[id]
	if c == nil && secret == "" {
		return
	}
	if c == nil {
		c = &ClusterStatus{ID: id}
		s.clusters[id] = c
	}
	if secret != "" {
		c.Secret = secret
	}
	if c.State != st {
		c.Since = s.clock.Now()
	}
	c.State = st
	if errMsg != "" || st == StateSynced || st == StateSyncing {
		c.Error = errMsg
	}
}

// SetStalePolicy records cluster id's stale-endpoint policy.
func (s *Status) SetStalePolicy(id model.ClusterID, p StalePolicy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.clusters[id]; c != nil {
		c.StalePolicy = p
	}
}

// SetScope records cluster id's discovery scope.
func (s *Status) SetScope(id model.ClusterID, sc Scope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.clusters[id]; c != nil {
		c.Scope = sc
	}
}

// SetDropped records that cluster id's endpoints were dropped at at (or,
// for a zero at, that they are served again).
func (s *Status) SetDropped(id model.ClusterID, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.clusters[id]; c != nil {
		c.Dropped = at
	}
}

// SetCredentialExpiry records when cluster id's credentials expire.
func (s *Status) SetCredentialExpiry(id model.ClusterID, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.clusters[id]; c != nil {
		c.CredentialExpiry = at
	}
}

// Now is the status clock's time, for Effective.
func (s *Status) Now() time.Time { return s.clock.Now() }

// CountError counts an error of cluster (or secret) name for reason.
func (s *Status) CountError(name, reason string) {
	s.errors.WithLabelValues(name, reason).Inc()
}

// CountReconnect counts one reconnection of cluster id (see
// WatcherOptions.Reconnect).
func (s *Status) CountReconnect(id model.ClusterID) {
	s.reconnects.WithLabelValues(string(id)).Inc()
}

// CountConfigReconnect counts a rebuild of the remote-secret cache after
// the config cluster's return.
func (s *Status) CountConfigReconnect() { s.configReconnects.Inc() }

// Delete forgets cluster id.
func (s *Status) Delete(id model.ClusterID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.clusters, id)
}

// Get returns cluster id's status.
func (s *Status) Get(id model.ClusterID) (ClusterStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clusters[id]
	if !ok {
		return ClusterStatus{}, false
	}
	return *c, true
}

// SetSecretError records (or with an empty msg clears) an error that
// concerns a whole secret.
func (s *Status) SetSecretError(secret, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if msg == "" {
		delete(s.secretErrors, secret)
		return
	}
	s.secretErrors[secret] = msg
}

// SecretError is an error that concerns a whole secret.
type SecretError struct {
	Secret string `json:"secret"`
	Error  string `json:"error"`
}

// Clusters returns every cluster's status, sorted by ID.
func (s *Status) Clusters() []ClusterStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ClusterStatus, 0, len(s.clusters))
	for _, c := range s.clusters {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b ClusterStatus) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

// SecretErrors returns the errors of whole secrets, sorted by secret.
func (s *Status) SecretErrors() []SecretError {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SecretError, 0, len(s.secretErrors))
	for _, k := range slices.Sorted(maps.Keys(s.secretErrors)) {
		out = append(out, SecretError{Secret: k, Error: s.secretErrors[k]})
	}
	return out
}

// Syncing reports whether any cluster is still listing for the first time.
func (s *Status) Syncing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.clusters {
		if c.State == StateSyncing {
			return true
		}
	}
	return false
}
