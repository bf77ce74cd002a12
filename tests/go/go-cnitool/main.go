// go-cnitool runs a conflist through the upstream Go libcni (Debian's
// golang-github-appc-cni-dev), the library CRI-O, podman's CNI backend and
// multus call plugins with; its command line is upstream cnitool's:
//
//	go-cnitool add|check|del <network> <netns-path>
//
// Environment, as cnitool reads it: NETCONFPATH (default /etc/cni/net.d),
// CNI_PATH, CNI_IFNAME (default eth0), CNI_ARGS (K=V;K=V), CAP_ARGS (a JSON
// object of capability arguments) and CNI_CONTAINERID (default: derived from
// the netns path, as cnitool does). "add" prints the result in the
// conflist's version.
package main

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

// cniArgs splits CNI_ARGS into libcni's key/value pairs.
func cniArgs() [][2]string {
	var pairs [][2]string
	for _, kv := range strings.Split(os.Getenv("CNI_ARGS"), ";") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			pairs = append(pairs, [2]string{k, v})
		}
	}
	return pairs
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: go-cnitool add|check|del <network> <netns-path>")
		os.Exit(2)
	}
	verb, name := os.Args[1], os.Args[2]
	list, err := libcni.LoadConfList(envOr("NETCONFPATH", "/etc/cni/net.d"), name)
	if err != nil {
		fail(err)
	}
	var capabilityArgs map[string]interface{}
	if raw := os.Getenv("CAP_ARGS"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &capabilityArgs); err != nil {
			fail(fmt.Errorf("CAP_ARGS: %w", err))
		}
	}
	netns, err := filepath.Abs(os.Args[3])
	if err != nil {
		fail(err)
	}
	// cnitool's container ID: "cnitool-" and the start of the path's SHA-512.
	containerID := envOr("CNI_CONTAINERID",
		fmt.Sprintf("cnitool-%x", sha512.Sum512([]byte(netns)))[:20])
	runtime := &libcni.RuntimeConf{
		ContainerID:    containerID,
		NetNS:          netns,
		IfName:         envOr("CNI_IFNAME", "eth0"),
		Args:           cniArgs(),
		CapabilityArgs: capabilityArgs,
	}
	cni := libcni.NewCNIConfig(filepath.SplitList(os.Getenv("CNI_PATH")), nil)
	ctx := context.Background()
	switch verb {
	case "add":
		result, err := cni.AddNetworkList(ctx, list, runtime)
		if result != nil {
			_ = result.Print()
		}
		if err != nil {
			fail(err)
		}
	case "check":
		if err := cni.CheckNetworkList(ctx, list, runtime); err != nil {
			fail(err)
		}
	case "del":
		if err := cni.DelNetworkList(ctx, list, runtime); err != nil {
			fail(err)
		}
	default:
		fail(fmt.Errorf("unknown command %q (add, check, del)", verb))
	}
}
