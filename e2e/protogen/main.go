// Command protogen compiles the project's .proto files into Go with
// protoc-gen-go's own generator, without protoc: the .proto is parsed by
// github.com/bufbuild/protocompile (pure Go), and the descriptors are
// handed to google.golang.org/protobuf's generator as protoc would hand
// them to the plugin. Both are pinned in this module's go.mod, so the
// output depends only on the sources.
//
// Usage (from the repository root; `make generate` runs it):
//
//	go run ./e2e/protogen -root . federation/peerpb/peer.proto
//
// Each file is written next to its .proto (paths=source_relative).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/cmd/protoc-gen-go/internal_gengo"
	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/pluginpb"
)

func main() {
	root := flag.String("root", ".", "import root of the .proto files (the repository root)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: protogen -root <dir> <file.proto>...")
		os.Exit(2)
	}
	if err := run(*root, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "protogen:", err)
		os.Exit(1)
	}
}

func run(root string, files []string) error {
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{root}}),
	}
	compiled, err := c.Compile(context.Background(), files...)
	if err != nil {
		return err
	}
	req := &pluginpb.CodeGeneratorRequest{
		FileToGenerate: files,
		Parameter:      proto.String("paths=source_relative"),
	}
	seen := map[string]bool{}
	for _, f := range compiled {
		addWithDeps(req, f, seen)
	}
	plugin, err := protogen.Options{}.New(req)
	if err != nil {
		return err
	}
	for _, f := range plugin.Files {
		if f.Generate {
			internal_gengo.GenerateFile(plugin, f)
		}
	}
	resp := plugin.Response()
	if resp.Error != nil {
		return fmt.Errorf("generator: %s", resp.GetError())
	}
	for _, out := range resp.File {
		path := filepath.Join(root, out.GetName())
		if err := os.WriteFile(path, []byte(out.GetContent()), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", path)
	}
	return nil
}

// addWithDeps appends f's descriptor after those of its imports, the order
// protoc gives a plugin.
func addWithDeps(req *pluginpb.CodeGeneratorRequest, f protoreflect.FileDescriptor, seen map[string]bool) {
	if seen[f.Path()] {
		return
	}
	seen[f.Path()] = true
	imports := f.Imports()
	for i := range imports.Len() {
		addWithDeps(req, imports.Get(i).FileDescriptor, seen)
	}
	req.ProtoFile = append(req.ProtoFile, protodesc.ToFileDescriptorProto(f))
}
