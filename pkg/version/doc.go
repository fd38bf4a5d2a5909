// Package version is the build's identity: the version and revision the
// Makefile stamps into every binary at link time (from `git describe`, or
// the VERSION file where there is no git), the Go toolchain, and the
// meshfed_build_info gauge that exports them.
//
// A binary built without the stamp (go build, go run, go test) reports the
// module version and VCS revision Go recorded in it, else "devel".
package version
