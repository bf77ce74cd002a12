// nerdctl-cni does what nerdctl does with CNI plugins (pkg/netutil and
// pkg/ocihook in nerdctl's source), through containerd's go-cni and
// Masterminds/semver v3 (Debian's golang-github-masterminds-semver-dev):
//
//	nerdctl-cni probe -bindir DIR
//	    nerdctl's FirewallPluginGEQVersion: DIR/firewall run with no
//	    arguments; on stderr only, the line that starts "CNI firewall plugin "
//	    and the rest of it parsed as a semver, compared with v1.7.1 (which
//	    picks ingressPolicy "isolated" for enable_icc=false) and v1.1.0
//	    (below which a user-defined network is warned about). Prints JSON.
//
//	nerdctl-cni create -bindir DIR -name NAME -subnet CIDR [-icc=false]
//	    The conflist "nerdctl network create" writes for a bridge network
//	    (the default network is named "bridge" and uses nerdctl0), on stdout:
//	    bridge + portmap + firewall + tuning, the firewall's ingressPolicy
//	    chosen by the probe above.
//
//	nerdctl-cni start|stop -bindir DIR -conflist FILE -netns PATH -id ID [-port HOST:CONTAINER]...
//	    The OCI hook's calls: start first removes with an empty netns (as
//	    nerdctl does before every setup, errors ignored), then sets up; stop
//	    removes with an empty netns, as nerdctl's onPostStop. The ports go
//	    with hostIP 0.0.0.0, as nerdctl normalises them; CNI_ARGS carry
//	    IgnoreUnknown=1 and NERDCTL_CNI_DHCP_HOSTNAME.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/Masterminds/semver"
	gocni "github.com/containerd/go-cni"
)

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "nerdctl-cni: "+format+"\n", args...)
	os.Exit(1)
}

// firewallVersion reads the firewall plugin's version from its stderr.
func firewallVersion(firewall string) (*semver.Version, error) {
	cmd := exec.Command(firewall)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("run %s: %w (stderr %q)", firewall, err, stderr.String())
	}
	const prefix = "CNI firewall plugin "
	for _, line := range strings.Split(stderr.String(), "\n") {
		rest := strings.TrimPrefix(line, prefix)
		if rest == line {
			continue
		}
		return semver.NewVersion(rest)
	}
	return nil, fmt.Errorf("stderr %q has no line starting %q", stderr.String(), prefix)
}

// atLeast is nerdctl's FirewallPluginGEQVersion: false when unreadable.
func atLeast(firewall, min string) (bool, error) {
	v, err := firewallVersion(firewall)
	if err != nil {
		return false, err
	}
	want := semver.MustParse(min)
	return v.GreaterThan(want) || v.Equal(want), nil
}

type ipamRange struct {
	Subnet  string `json:"subnet"`
	Gateway string `json:"gateway,omitempty"`
}

type ipamRoute struct {
	Dst string `json:"dst,omitempty"`
}

type hostLocal struct {
	Type   string        `json:"type"`
	Routes []ipamRoute   `json:"routes,omitempty"`
	Ranges [][]ipamRange `json:"ranges,omitempty"`
}

type bridgeConfig struct {
	PluginType   string                 `json:"type"`
	BrName       string                 `json:"bridge,omitempty"`
	IsGW         bool                   `json:"isGateway,omitempty"`
	IPMasq       bool                   `json:"ipMasq,omitempty"`
	MTU          int                    `json:"mtu,omitempty"`
	HairpinMode  bool                   `json:"hairpinMode,omitempty"`
	IPAM         map[string]interface{} `json:"ipam"`
	Capabilities map[string]bool        `json:"capabilities,omitempty"`
}

type portMapConfig struct {
	PluginType   string          `json:"type"`
	Capabilities map[string]bool `json:"capabilities"`
}

type firewallConfig struct {
	PluginType    string `json:"type"`
	Backend       string `json:"backend,omitempty"`
	IngressPolicy string `json:"ingressPolicy,omitempty"`
}

type tuningConfig struct {
	PluginType string `json:"type"`
}

type conflist struct {
	CNIVersion string            `json:"cniVersion"`
	Name       string            `json:"name"`
	ID         string            `json:"nerdctlID,omitempty"`
	Labels     map[string]string `json:"nerdctlLabels,omitempty"`
	Plugins    []interface{}     `json:"plugins"`
}

func create(binDir, name, subnet string, icc bool) {
	firewall := filepath.Join(binDir, "firewall")
	policy := "same-bridge"
	if !icc {
		if ok, err := atLeast(firewall, "v1.7.1"); err != nil {
			fmt.Fprintf(os.Stderr, "warning: cannot tell whether %q is newer than v1.7.1: %v\n", firewall, err)
		} else if ok {
			policy = "isolated"
		} else {
			fmt.Fprintf(os.Stderr, "warning: 'isolated' needs firewall >= 1.7.1\n")
		}
	}
	if name != "bridge" {
		if ok, _ := atLeast(firewall, "v1.1.0"); !ok {
			fmt.Fprintf(os.Stderr, "warning: isolating bridge networks needs firewall >= 1.1.0\n")
		}
	}
	_, cidr, err := net.ParseCIDR(subnet)
	if err != nil {
		fail("bad -subnet %q", subnet)
	}
	gw := make(net.IP, len(cidr.IP))
	copy(gw, cidr.IP)
	gw[len(gw)-1]++
	sum := sha256.Sum256([]byte(name))
	id := hex.EncodeToString(sum[:])
	brName := "br-" + id[:12]
	if name == "bridge" {
		brName = "nerdctl0"
	}
	// nerdctl turns the IPAM struct into a map (structToMap), so its keys
	// are written sorted.
	raw, _ := json.Marshal(hostLocal{
		Type:   "host-local",
		Routes: []ipamRoute{{Dst: "0.0.0.0/0"}},
		Ranges: [][]ipamRange{{{Subnet: cidr.String(), Gateway: gw.String()}}},
	})
	var ipam map[string]interface{}
	_ = json.Unmarshal(raw, &ipam)
	conf := conflist{
		CNIVersion: "1.0.0",
		Name:       name,
		ID:         id,
		Labels:     map[string]string{},
		Plugins: []interface{}{
			&bridgeConfig{PluginType: "bridge", BrName: brName, IsGW: true, IPMasq: true,
				HairpinMode: true, IPAM: ipam, Capabilities: map[string]bool{}},
			&portMapConfig{PluginType: "portmap", Capabilities: map[string]bool{"portMappings": true}},
			&firewallConfig{PluginType: "firewall", IngressPolicy: policy},
			&tuningConfig{PluginType: "tuning"},
		},
	}
	out, _ := json.MarshalIndent(conf, "", "  ")
	fmt.Println(string(out))
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: nerdctl-cni probe|create|start|stop [flags]")
	}
	verb := os.Args[1]
	flags := flag.NewFlagSet(verb, flag.ExitOnError)
	binDir := flags.String("bindir", "/opt/cni/bin", "CNI_PATH")
	name := flags.String("name", "bridge", "network name")
	subnet := flags.String("subnet", "10.4.0.0/24", "network subnet")
	icc := flags.Bool("icc", true, "com.docker.network.bridge.enable_icc")
	var confFiles, ports listFlag
	flags.Var(&confFiles, "conflist", "a network's conflist (repeatable)")
	netns := flags.String("netns", "", "the container's network namespace")
	id := flags.String("id", "", "container ID")
	flags.Var(&ports, "port", "HOST:CONTAINER (repeatable)")
	_ = flags.Parse(os.Args[2:])

	switch verb {
	case "probe":
		firewall := filepath.Join(*binDir, "firewall")
		v, err := firewallVersion(firewall)
		if err != nil {
			fail("%v", err)
		}
		isolated, _ := atLeast(firewall, "v1.7.1")
		userNetworks, _ := atLeast(firewall, "v1.1.0")
		_ = json.NewEncoder(os.Stdout).Encode(map[string]interface{}{
			"version": v.Original(), "isolated": isolated, "userNetworks": userNetworks,
		})
		return
	case "create":
		create(*binDir, *name, *subnet, *icc)
		return
	}

	opts := []gocni.Opt{gocni.WithPluginDir([]string{*binDir})}
	for _, f := range confFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			fail("%v", err)
		}
		opts = append(opts, gocni.WithConfListBytes(b))
	}
	c, err := gocni.New(opts...)
	if err != nil {
		fail("new: %v", err)
	}
	var mappings []gocni.PortMapping
	for _, p := range ports {
		host, container, _ := strings.Cut(p, ":")
		h, err1 := strconv.Atoi(host)
		ct, err2 := strconv.Atoi(container)
		if err1 != nil || err2 != nil {
			fail("bad -port %q", p)
		}
		mappings = append(mappings, gocni.PortMapping{
			HostPort: int32(h), ContainerPort: int32(ct), Protocol: "tcp", HostIP: "0.0.0.0",
		})
	}
	nsOpts := []gocni.NamespaceOpts{
		gocni.WithCapabilityPortMap(mappings),
		gocni.WithLabels(map[string]string{"IgnoreUnknown": "1"}),
		gocni.WithArgs("NERDCTL_CNI_DHCP_HOSTNAME", *id),
	}
	ctx := context.Background()
	switch verb {
	case "start":
		_ = c.Remove(ctx, *id, "", nsOpts...)
		res, err := c.Setup(ctx, *id, *netns, nsOpts...)
		if err != nil {
			fail("setup: %v", err)
		}
		_ = json.NewEncoder(os.Stdout).Encode(map[string]interface{}{"interfaces": res.Interfaces})
	case "stop":
		if err := c.Remove(ctx, *id, "", nsOpts[:1]...); err != nil {
			fail("remove: %v", err)
		}
	default:
		fail("unknown verb %q", verb)
	}
}
