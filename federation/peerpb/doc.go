// Package peerpb holds the generated protobuf messages of the peer stream
// (peer.proto). Edit the .proto and run `make generate`; `make lint`
// fails when the generated code is stale. Package federation converts
// between these messages and its own types.
package peerpb
