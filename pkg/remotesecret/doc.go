// Package remotesecret parses Istio-format remote secrets: Kubernetes Secrets
// labelled istio/multiCluster=true whose data keys are cluster IDs and whose
// values are kubeconfigs for those clusters (what `istioctl
// create-remote-secret` writes; one secret may carry several clusters).
//
// Parsing is per cluster: a malformed kubeconfig under one key is reported
// for that cluster alone and does not hide the good clusters of the same
// secret. The package does no I/O; it turns bytes into rest.Configs.
package remotesecret
