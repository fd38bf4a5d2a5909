package remotesecret

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshfed/meshfed/pkg/model"
)

// MultiClusterLabel marks a Secret as a remote secret.
const MultiClusterLabel = "istio/multiCluster"

// Errors that name the cause of a rejected secret or cluster entry.
var (
	ErrNoClusters        = errors.New("remotesecret: secret holds no clusters")
	ErrInvalidClusterID  = errors.New("remotesecret: invalid cluster ID")
	ErrInvalidKubeconfig = errors.New("remotesecret: invalid kubeconfig")
)

// Cluster is one valid entry of a remote secret.
type Cluster struct {
	ID model.ClusterID
	// Kubeconfig is the raw kubeconfig, kept so a change of credentials
	// (a rotated token) can be detected by comparing bytes.
	Kubeconfig []byte
	// Config is the client configuration the kubeconfig describes.
	Config *rest.Config
	// TokenExpiry is when the kubeconfig's bearer token expires, when it is
	// a JWT with an exp claim (as TokenRequest tokens are); zero otherwise.
	TokenExpiry time.Time
}

// Invalid is an entry of a remote secret that could not be used.
type Invalid struct {
	ID  model.ClusterID
	Err error
}

// Parsed is the result of parsing one secret: the usable clusters and the
// rejected entries, each sorted by cluster ID.
type Parsed struct {
	Clusters []Cluster
	Invalid  []Invalid
}

// Parse reads the data of a remote secret. It fails as a whole only when the
// secret holds no entries at all; otherwise each entry is either a Cluster or
// an Invalid with the reason.
func Parse(data map[string][]byte) (Parsed, error) {
	if len(data) == 0 {
		return Parsed{}, ErrNoClusters
	}
	var out Parsed
	for _, key := range slices.Sorted(maps.Keys(data)) {
		id := model.ClusterID(key)
		if err := ValidateClusterID(key); err != nil {
			out.Invalid = append(out.Invalid, Invalid{ID: id, Err: err})
			continue
		}
		cfg, err := RESTConfig(data[key])
		if err != nil {
			out.Invalid = append(out.Invalid, Invalid{ID: id, Err: fmt.Errorf("cluster %q: %w", key, err)})
			continue
		}
		out.Clusters = append(out.Clusters, Cluster{ID: id, Kubeconfig: data[key], Config: cfg, TokenExpiry: TokenExpiry(cfg.BearerToken)})
	}
	return out, nil
}

// ValidateClusterID checks that id can name a cluster: a valid Secret data
// key (letters, digits, '-', '_', '.'), at most 253 characters.
func ValidateClusterID(id string) error {
	if errs := validation.IsConfigMapKey(id); len(errs) > 0 {
		return fmt.Errorf("%w %q: %s", ErrInvalidClusterID, id, errs[0])
	}
	return nil
}

// RESTConfig turns a kubeconfig into a client configuration for its current
// context. The kubeconfig must be self-contained: credentials that refer to
// files or exec plugins of the hub's machine are refused, since a remote
// secret must not make the hub read or run local things.
func RESTConfig(kubeconfig []byte) (*rest.Config, error) {
	if len(kubeconfig) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrInvalidKubeconfig)
	}
	raw, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidKubeconfig, err)
	}
	if raw.CurrentContext == "" {
		return nil, fmt.Errorf("%w: no current-context", ErrInvalidKubeconfig)
	}
	for name, ai := range raw.AuthInfos {
		switch {
		case ai.Exec != nil:
			return nil, fmt.Errorf("%w: user %q uses an exec plugin, which remote secrets may not", ErrInvalidKubeconfig, name)
		case ai.AuthProvider != nil:
			return nil, fmt.Errorf("%w: user %q uses an auth provider, which remote secrets may not", ErrInvalidKubeconfig, name)
		case ai.TokenFile != "" || ai.ClientCertificate != "" || ai.ClientKey != "":
			return nil, fmt.Errorf("%w: user %q refers to local files, which remote secrets may not", ErrInvalidKubeconfig, name)
		}
	}
	for name, c := range raw.Clusters {
		if c.CertificateAuthority != "" {
			return nil, fmt.Errorf("%w: cluster %q refers to a local CA file, which remote secrets may not", ErrInvalidKubeconfig, name)
		}
	}
	if err := clientcmd.Validate(*raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidKubeconfig, err)
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidKubeconfig, err)
	}
	return cfg, nil
}

// TokenExpiry reads the exp claim of a JWT bearer token without verifying
// it: the hub only uses it to warn that a remote secret needs rotating. It
// returns the zero time for anything that is not a JWT with an exp claim.
func TokenExpiry(token string) time.Time {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}
	}
	var claims struct {
		Exp *int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil {
		return time.Time{}
	}
	return time.Unix(*claims.Exp, 0).UTC()
}
