module github.com/meshfed/meshfed/e2e/protogen

go 1.26.3

require (
	github.com/bufbuild/protocompile v0.14.1
	google.golang.org/protobuf v1.36.12
)

require golang.org/x/sync v0.8.0 // indirect
