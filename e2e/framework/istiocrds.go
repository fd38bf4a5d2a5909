package framework

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
)

// IstioCRDFile is the hub chart's file of Istio networking CRDs
// (VirtualService, DestinationRule, ServiceEntry, Sidecar, Gateway), relative to the
// module root: what `helm install` of the hub chart installs from crds/.
const IstioCRDFile = "remote-charts/hub/crds/networking.istio.io.yaml"

// IstioSecurityCRDFile is the hub chart's file of Istio security CRDs
// (PeerAuthentication, AuthorizationPolicy), relative to the module root.
const IstioSecurityCRDFile = "remote-charts/hub/crds/security.istio.io.yaml"

// IstioCRDFiles are the hub chart's CRD files that every config cluster
// gets, relative to the module root.
var IstioCRDFiles = []string{IstioCRDFile, IstioSecurityCRDFile}

// installIstioCRDs installs IstioCRDFiles into c and waits until the
// apiserver serves every version of them. The files are read from the
// module containing the working directory, as the hub binary is built
// from it: tests and `make demo` run inside the module.
func installIstioCRDs(ctx context.Context, c *Cluster) error {
	root, err := ModuleRoot(ctx, "")
	if err != nil {
		return err
	}
	paths := make([]string, len(IstioCRDFiles))
	for i, f := range IstioCRDFiles {
		paths[i] = filepath.Join(root, f)
	}
	// InstallCRDs creates the CRDs and polls discovery until each version
	// is served (Established alone does not say the endpoints answer).
	if _, err := envtest.InstallCRDs(c.cfg, envtest.CRDInstallOptions{
		Paths:              paths,
		ErrorIfPathMissing: true,
	}); err != nil {
		return fmt.Errorf("framework: installing the Istio CRDs in %s: %w", c.name, err)
	}
	return nil
}

// InstallIstioCRDs installs the hub chart's Istio CRDs into a config
// cluster started without them (FleetOptions.NoIstioCRDs).
func (c *ConfigCluster) InstallIstioCRDs(ctx context.Context) error {
	return installIstioCRDs(ctx, c.Cluster)
}

// ApplyIstio creates or replaces, in the config cluster, the Istio objects
// of doc (YAML, one object or several separated by "---"), in order,
// straight into the apiserver: no validation webhook runs there, as when
// the spoke's is bypassed. Their namespaces are created when missing.
func (c *ConfigCluster) ApplyIstio(ctx context.Context, doc string) error {
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(doc)))
	applied := 0
	for {
		part, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("framework: Istio objects: %w", err)
		}
		if len(bytes.TrimSpace(part)) == 0 {
			continue
		}
		if err := c.applyIstio(ctx, part); err != nil {
			return err
		}
		applied++
	}
	if applied == 0 {
		return errors.New("framework: no Istio object to apply")
	}
	return nil
}

// applyIstio creates or replaces the one object of doc.
func (c *ConfigCluster) applyIstio(ctx context.Context, doc []byte) error {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(doc, &u.Object); err != nil {
		return fmt.Errorf("framework: Istio object: %w", err)
	}
	if ns := u.GetNamespace(); ns != "" { // cluster-scoped kinds have none
		if err := c.EnsureNamespace(ctx, ns); err != nil {
			return err
		}
	}
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(u.GroupVersionKind())
	err := c.client.Get(ctx, client.ObjectKeyFromObject(u), cur)
	switch {
	case apierrors.IsNotFound(err):
		err = c.client.Create(ctx, u)
	case err == nil:
		u.SetResourceVersion(cur.GetResourceVersion())
		err = c.client.Update(ctx, u)
	}
	if err != nil {
		return fmt.Errorf("framework: applying %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// DeleteIstio deletes the Istio object kind ns/name from the config
// cluster, in v1 of the kind's group (security.istio.io for
// PeerAuthentication and AuthorizationPolicy, networking.istio.io for the
// rest).
func (c *ConfigCluster) DeleteIstio(ctx context.Context, kind, ns, name string) error {
	group := validate.GroupOf(kind)
	if group == "" {
		group = validate.Group
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(group + "/v1")
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	if err := c.client.Delete(ctx, u); err != nil {
		return fmt.Errorf("framework: deleting %s %s/%s: %w", kind, ns, name, err)
	}
	return nil
}
