// Package e2e holds meshfed's end-to-end scenarios: real kube-apiservers, the
// built hub binary as a process, real gRPC backends and real grpc-go xDS
// clients, assembled by the fleet framework in e2e/framework. It also checks
// the repository's import rules (TestImportRules).
package e2e
