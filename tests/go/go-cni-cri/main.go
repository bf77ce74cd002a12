// go-cni-cri calls CNI plugins through containerd's go-cni library (Debian's
// golang-github-containerd-go-cni-dev) with the options containerd 1.6's CRI
// plugin builds for a kubelet sandbox, so a chain that passes here passes
// under containerd:
//
//   - the conf dir is loaded with the loopback network first and the first
//     config file as the pod network (at least two networks);
//   - CNI_ARGS carry the K8S_POD_* labels and IgnoreUnknown=1;
//   - runtimeConfig gets the pod annotations, and portMappings, bandwidth and
//     dns in go-cni's own structs (hence the capitalised keys plugins see).
//
// Usage:
//
//	go-cni-cri setup|check|remove|status -confdir DIR -bindir DIR -netns PATH -id SANDBOX [flags]
//
// Flags besides those: -name, -namespace, -uid (pod metadata); -port
// HOST:CONTAINER[/tcp|udp|sctp][@HOSTIP] (repeatable); -ingress and -egress
// (kubelet's bandwidth annotation values: 10M, 1Gi, 500k, plain bits/s);
// -dns-server, -dns-search, -dns-option and -annotation K=V (repeatable).
// "remove" with an empty -netns is containerd's teardown of a sandbox whose
// namespace is gone. "setup" prints the interfaces, DNS and routes of go-cni's
// result as JSON.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	gocni "github.com/containerd/go-cni"
)

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "go-cni-cri: "+format+"\n", args...)
	os.Exit(1)
}

// quantitySuffixes are the suffixes of a Kubernetes resource quantity that a
// bandwidth annotation uses, longest first so "Mi" is tried before "M".
var quantitySuffixes = []struct {
	suffix string
	factor float64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
}

// bitsPerSecond reads a bandwidth annotation value as kubelet does.
func bitsPerSecond(value string) uint64 {
	number, factor := value, 1.0
	for _, q := range quantitySuffixes {
		if strings.HasSuffix(value, q.suffix) {
			number, factor = strings.TrimSuffix(value, q.suffix), q.factor
			break
		}
	}
	n, err := strconv.ParseFloat(number, 64)
	if err != nil || n < 0 {
		fail("bad bandwidth %q", value)
	}
	return uint64(n * factor)
}

// parsePort reads HOST:CONTAINER[/proto][@hostip] into go-cni's struct, the
// one containerd fills from the sandbox's port mappings.
func parsePort(spec string) gocni.PortMapping {
	rest := spec
	mapping := gocni.PortMapping{Protocol: "tcp"}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		mapping.HostIP, rest = rest[at+1:], rest[:at]
	}
	if slash := strings.Index(rest, "/"); slash >= 0 {
		mapping.Protocol, rest = strings.ToLower(rest[slash+1:]), rest[:slash]
	}
	host, container, ok := strings.Cut(rest, ":")
	if !ok {
		fail("bad -port %q: want HOST:CONTAINER[/proto][@hostip]", spec)
	}
	h, err1 := strconv.ParseInt(host, 10, 32)
	c, err2 := strconv.ParseInt(container, 10, 32)
	if err1 != nil || err2 != nil {
		fail("bad -port %q: ports are numbers", spec)
	}
	mapping.HostPort, mapping.ContainerPort = int32(h), int32(c)
	return mapping
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: go-cni-cri setup|check|remove|status -confdir DIR -bindir DIR -netns PATH -id SANDBOX [flags]")
	}
	verb := os.Args[1]
	flags := flag.NewFlagSet(verb, flag.ExitOnError)
	confDir := flags.String("confdir", "/etc/cni/net.d", "CNI conf dir")
	binDir := flags.String("bindir", "/opt/cni/bin", "CNI bin dir")
	netns := flags.String("netns", "", "the sandbox's network namespace path")
	sandbox := flags.String("id", "", "sandbox ID (CNI_CONTAINERID)")
	podName := flags.String("name", "pod", "pod name")
	podNamespace := flags.String("namespace", "default", "pod namespace")
	podUID := flags.String("uid", "00000000-0000-0000-0000-000000000001", "pod UID")
	ingress := flags.String("ingress", "", "kubernetes.io/ingress-bandwidth")
	egress := flags.String("egress", "", "kubernetes.io/egress-bandwidth")
	var ports, dnsServers, dnsSearches, dnsOptions, annotationFlags listFlag
	flags.Var(&ports, "port", "HOST:CONTAINER[/proto][@hostip]")
	flags.Var(&dnsServers, "dns-server", "DNS server")
	flags.Var(&dnsSearches, "dns-search", "DNS search domain")
	flags.Var(&dnsOptions, "dns-option", "DNS option")
	flags.Var(&annotationFlags, "annotation", "pod annotation K=V")
	_ = flags.Parse(os.Args[2:])

	// containerd's CRI: loopback plus the pod network, which is the first
	// config of the conf dir.
	network, err := gocni.New(
		gocni.WithMinNetworkCount(2),
		gocni.WithPluginConfDir(*confDir),
		gocni.WithPluginMaxConfNum(1),
		gocni.WithPluginDir([]string{*binDir}),
	)
	if err != nil {
		fail("new: %v", err)
	}
	if err := network.Load(gocni.WithLoNetwork, gocni.WithDefaultConf); err != nil {
		fail("load: %v", err)
	}
	if verb == "status" {
		if err := network.Status(); err != nil {
			fail("status: %v", err)
		}
		return
	}
	if *sandbox == "" {
		fail("-id is required")
	}

	annotations := map[string]string{}
	for _, kv := range annotationFlags {
		if k, v, ok := strings.Cut(kv, "="); ok {
			annotations[k] = v
		}
	}
	if *ingress != "" {
		annotations["kubernetes.io/ingress-bandwidth"] = *ingress
	}
	if *egress != "" {
		annotations["kubernetes.io/egress-bandwidth"] = *egress
	}
	opts := []gocni.NamespaceOpts{
		gocni.WithLabels(map[string]string{
			"K8S_POD_NAMESPACE":          *podNamespace,
			"K8S_POD_NAME":               *podName,
			"K8S_POD_INFRA_CONTAINER_ID": *sandbox,
			"K8S_POD_UID":                *podUID,
			"IgnoreUnknown":              "1",
		}),
		gocni.WithCapability("io.kubernetes.cri.pod-annotations", annotations),
	}
	if len(ports) > 0 {
		var mappings []gocni.PortMapping
		for _, p := range ports {
			mappings = append(mappings, parsePort(p))
		}
		opts = append(opts, gocni.WithCapabilityPortMap(mappings))
	}
	if *ingress != "" || *egress != "" {
		// containerd sets each burst to MaxUint32 bits.
		var bw gocni.BandWidth
		if *ingress != "" {
			bw.IngressRate, bw.IngressBurst = bitsPerSecond(*ingress), math.MaxUint32
		}
		if *egress != "" {
			bw.EgressRate, bw.EgressBurst = bitsPerSecond(*egress), math.MaxUint32
		}
		opts = append(opts, gocni.WithCapabilityBandWidth(bw))
	}
	if len(dnsServers)+len(dnsSearches)+len(dnsOptions) > 0 {
		opts = append(opts, gocni.WithCapabilityDNS(gocni.DNS{
			Servers: dnsServers, Searches: dnsSearches, Options: dnsOptions,
		}))
	}

	ctx := context.Background()
	switch verb {
	case "setup":
		result, err := network.Setup(ctx, *sandbox, *netns, opts...)
		if err != nil {
			fail("setup: %v", err)
		}
		out := json.NewEncoder(os.Stdout)
		out.SetIndent("", "  ")
		_ = out.Encode(map[string]interface{}{
			"interfaces": result.Interfaces,
			"dns":        result.DNS,
			"routes":     result.Routes,
		})
	case "check":
		if err := network.Check(ctx, *sandbox, *netns, opts...); err != nil {
			fail("check: %v", err)
		}
	case "remove":
		if err := network.Remove(ctx, *sandbox, *netns, opts...); err != nil {
			fail("remove: %v", err)
		}
	default:
		fail("unknown verb %q (setup, check, remove, status)", verb)
	}
}
