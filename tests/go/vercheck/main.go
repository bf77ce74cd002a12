// vercheck asks a plugin for VERSION as the Go libcni does for runtimes
// (invoke.GetVersionInfo: exec, then version.PluginDecoder) and prints the
// versions it decoded, space-separated, or the error with exit 1.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
)

func main() {
	info, err := invoke.GetVersionInfo(context.Background(), os.Args[1], nil)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(strings.Join(info.SupportedVersions(), " "))
}
