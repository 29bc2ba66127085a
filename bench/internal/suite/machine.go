package suite

import (
	"bufio"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// Machine describes where the benchmark ran.
type Machine struct {
	CPUModel string `json:"cpuModel"`
	CPUs     int    `json:"cpus"`
	Memory   string `json:"memory"` // MemTotal from /proc/meminfo
}

// Versions names what was compared.
type Versions struct {
	Go                string `json:"go"`
	ClientGo          string `json:"clientGo"`
	ControllerRuntime string `json:"controllerRuntime"`
	APIServer         string `json:"apiServer"`
}

// describeMachine reads /proc for the CPU model and memory size.
func describeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU()}
	m.CPUModel = procField("/proc/cpuinfo", "model name")
	m.Memory = procField("/proc/meminfo", "MemTotal")
	return m
}

// procField returns the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// describeVersions reads the module versions linked into this binary and
// asks the API server for its own.
func describeVersions(cfg *rest.Config) Versions {
	v := Versions{Go: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			switch dep.Path {
			case "k8s.io/client-go":
				v.ClientGo = dep.Version
			case "sigs.k8s.io/controller-runtime":
				v.ControllerRuntime = dep.Version
			}
		}
	}
	if dc, err := discovery.NewDiscoveryClientForConfig(cfg); err == nil {
		if sv, err := dc.ServerVersion(); err == nil {
			v.APIServer = sv.GitVersion
		}
	}
	return v
}

// DescribeMachine reads /proc for the CPU model and memory size, for other
// benchmarks of the module (the operator's scale benchmark).
func DescribeMachine() Machine { return describeMachine() }
