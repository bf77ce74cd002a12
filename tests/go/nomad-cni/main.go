// nomad-cni calls CNI plugins as a Nomad client does for an allocation in
// bridge networking mode (client/allocrunner/networking_bridge_linux.go,
// networking_cni.go, client/fingerprint/plugins_cni.go in Nomad's source),
// through containerd's go-cni (Debian's golang-github-containerd-go-cni-dev)
// and hashicorp/go-version (golang-github-hashicorp-go-version-dev):
//
//	nomad-cni fingerprint DIR
//	    Nomad's CNI plugin fingerprint of the executables in DIR: each run
//	    with no arguments (3 s at most), stdout and stderr together, the
//	    first whitespace-separated word that parses as a semver is the
//	    attribute plugins.cni.version.<file>. Then the scheduler's implicit
//	    constraints of a bridge-mode job ("semver >= 0.4.0" on bridge,
//	    firewall, host-local, loopback and portmap) and the client's rule for
//	    CHECK on restart (bridge ">= 1.3.0"). Prints JSON.
//
//	nomad-cni setup|check|remove -bindir DIR -conflist FILE -netns PATH -alloc ID
//	          [-subnet CIDR]... [-port HOST[:TO]]...
//	    setup first ensures Nomad's NOMAD-ADMIN chain with its rule accepting
//	    traffic to each -subnet on the bridge named in the conflist (with the
//	    iptables programs, as Nomad's go-iptables does), then calls go-cni
//	    with interface prefix "eth", the conflist's bytes, every port mapped
//	    for both tcp and udp, and the CNI_ARGS labels Nomad sets
//	    (IgnoreUnknown=true and NOMAD_*). check passes the same; remove only
//	    the port mappings, as Nomad's Teardown.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	gocni "github.com/containerd/go-cni"
	version "github.com/hashicorp/go-version"
)

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "nomad-cni: "+format+"\n", args...)
	os.Exit(1)
}

// pluginVersion is what Nomad's fingerprint reads from one executable.
func pluginVersion(path string) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path).CombinedOutput()
	if err != nil {
		return "unknown", false
	}
	for _, word := range strings.Fields(string(out)) {
		if _, err := version.NewSemver(word); err == nil {
			return word, true
		}
	}
	return "unknown", false
}

// atLeast is Nomad's semver constraint ">= min" on an attribute: a missing
// or unparsable attribute does not satisfy it.
func atLeast(attrs map[string]string, plugin, min string) bool {
	v, ok := attrs[plugin]
	if !ok {
		return false
	}
	have, err := version.NewSemver(v)
	if err != nil {
		return false
	}
	return have.Compare(version.Must(version.NewSemver(min))) >= 0
}

func fingerprint(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		fail("read %s: %v", dir, err)
	}
	attrs := map[string]string{}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || info.Mode()&0o111 == 0 || info.IsDir() {
			continue
		}
		if v, ok := pluginVersion(filepath.Join(dir, e.Name())); ok {
			attrs[e.Name()] = v
		}
	}
	bridgeMode := true
	for _, p := range []string{"bridge", "firewall", "host-local", "loopback", "portmap"} {
		bridgeMode = bridgeMode && atLeast(attrs, p, "0.4.0")
	}
	_ = json.NewEncoder(os.Stdout).Encode(map[string]interface{}{
		"attributes":     attrs,
		"bridgeMode":     bridgeMode,
		"checkOnRestart": atLeast(attrs, "bridge", "1.3.0"),
	})
}

// ensureAdminRule is Nomad's ensureChainRule: the NOMAD-ADMIN chain in the
// filter table and "-o BRIDGE -d SUBNET -j ACCEPT" in it, once.
func ensureAdminRule(bridge, subnet string) {
	program := "iptables"
	if strings.Contains(subnet, ":") {
		program = "ip6tables"
	}
	chains, err := exec.Command(program, "-t", "filter", "-S").Output()
	if err != nil {
		fail("%s -S: %v", program, err)
	}
	if !strings.Contains(string(chains), "-N NOMAD-ADMIN\n") {
		if out, err := exec.Command(program, "-t", "filter", "-N", "NOMAD-ADMIN").CombinedOutput(); err != nil {
			fail("%s -N NOMAD-ADMIN: %v: %s", program, err, out)
		}
	}
	rule := []string{"-o", bridge, "-d", subnet, "-j", "ACCEPT"}
	check := append([]string{"-t", "filter", "-C", "NOMAD-ADMIN"}, rule...)
	if exec.Command(program, check...).Run() != nil {
		add := append([]string{"-t", "filter", "-A", "NOMAD-ADMIN"}, rule...)
		if out, err := exec.Command(program, add...).CombinedOutput(); err != nil {
			fail("%s %v: %v: %s", program, add, err, out)
		}
	}
}

func main() {
	if len(os.Args) < 3 {
		fail("usage: nomad-cni fingerprint DIR | setup|check|remove -bindir DIR -conflist FILE -netns PATH -alloc ID")
	}
	verb := os.Args[1]
	if verb == "fingerprint" {
		fingerprint(os.Args[2])
		return
	}
	flags := flag.NewFlagSet(verb, flag.ExitOnError)
	binDir := flags.String("bindir", "/opt/cni/bin", "CNI plugin dir (Nomad's cni_path)")
	conflist := flags.String("conflist", "", "the conflist Nomad generated")
	netns := flags.String("netns", "", "the allocation's network namespace")
	alloc := flags.String("alloc", "", "allocation ID (CNI_CONTAINERID)")
	var subnets, ports listFlag
	flags.Var(&subnets, "subnet", "bridge subnet for NOMAD-ADMIN (repeatable)")
	flags.Var(&ports, "port", "HOST[:TO] (repeatable)")
	_ = flags.Parse(os.Args[2:])

	bytes, err := os.ReadFile(*conflist)
	if err != nil {
		fail("%v", err)
	}
	var list struct {
		Plugins []map[string]interface{} `json:"plugins"`
	}
	if err := json.Unmarshal(bytes, &list); err != nil {
		fail("conflist: %v", err)
	}
	bridge := ""
	for _, p := range list.Plugins {
		if p["type"] == "bridge" {
			bridge, _ = p["bridge"].(string)
		}
	}

	var mappings []gocni.PortMapping
	for _, p := range ports {
		host, to, _ := strings.Cut(p, ":")
		h, err := strconv.Atoi(host)
		if err != nil {
			fail("bad -port %q", p)
		}
		t := h
		if to != "" {
			if t, err = strconv.Atoi(to); err != nil {
				fail("bad -port %q", p)
			}
		}
		for _, proto := range []string{"tcp", "udp"} {
			mappings = append(mappings, gocni.PortMapping{
				HostPort: int32(h), ContainerPort: int32(t), Protocol: proto,
			})
		}
	}
	args := map[string]string{
		"IgnoreUnknown":    "true",
		"NOMAD_REGION":     "global",
		"NOMAD_NAMESPACE":  "default",
		"NOMAD_JOB_ID":     "example",
		"NOMAD_GROUP_NAME": "web",
		"NOMAD_ALLOC_ID":   *alloc,
	}

	c, err := gocni.New(gocni.WithPluginDir(filepath.SplitList(*binDir)), gocni.WithInterfacePrefix("eth"))
	if err != nil {
		fail("new: %v", err)
	}
	if err := c.Load(gocni.WithConfListBytes(bytes)); err != nil {
		fail("load: %v", err)
	}
	ctx := context.Background()
	switch verb {
	case "setup":
		for _, s := range subnets {
			ensureAdminRule(bridge, s)
		}
		res, err := c.Setup(ctx, *alloc, *netns, gocni.WithCapabilityPortMap(mappings), gocni.WithLabels(args))
		if err != nil {
			fail("setup: %v", err)
		}
		_ = json.NewEncoder(os.Stdout).Encode(map[string]interface{}{"interfaces": res.Interfaces})
	case "check":
		if err := c.Check(ctx, *alloc, *netns, gocni.WithCapabilityPortMap(mappings), gocni.WithLabels(args)); err != nil {
			fail("check: %v", err)
		}
	case "remove":
		if err := c.Remove(ctx, *alloc, *netns, gocni.WithCapabilityPortMap(mappings)); err != nil {
			fail("remove: %v", err)
		}
	default:
		fail("unknown verb %q", verb)
	}
}
