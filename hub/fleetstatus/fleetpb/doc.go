// Package fleetpb holds the generated protobuf messages of the fleet
// status exchanged between hub replicas (fleet.proto). Edit the .proto and
// run `make generate`; package fleetstatus converts.
package fleetpb
