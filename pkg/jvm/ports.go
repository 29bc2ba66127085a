package jvm

import (
	"context"
	"fmt"
	"sort"
)

// maxPortSearch bounds how many ports above the requested one AssignPorts tries for one JVM.
const maxPortSearch = 1000

// PortAssignment is the port AssignPorts chose for one JVM, or why there is none.
type PortAssignment struct {
	// JVM is the JVM the port is for.
	JVM JVM
	// Port is the port its agent is to serve on; 0 when Err is set.
	Port int
	// Err is an *AttachError when no port could be given to the JVM.
	Err error
}

// AssignPorts chooses the port each JVM's agent serves on when several JVMs are injected at once, so that JVMs
// sharing a network namespace (the containers of one pod) never get the same port. JVMs in different network
// namespaces do not compete and are planned independently. Within one namespace the JVMs are taken oldest
// first, and:
//
//   - a JVM the agent was loaded into before keeps the port it has (read from its marker), so that running the
//     same injection again changes nothing;
//   - with one port, the oldest JVM gets it, as a single JVM would, and each later JVM the lowest port from it
//     on that no other JVM of the namespace has and that CheckPort finds free (a port that cannot be checked
//     is given anyway, and Inject reports why);
//   - with several ports, the i-th oldest JVM gets the i-th port, and a JVM beyond the list gets an error.
//
// The result is in the order of jvms.
func AssignPorts(jvms []JVM, host string, ports []int) []PortAssignment {
	out := make([]PortAssignment, len(jvms))
	for i, j := range jvms {
		out[i].JVM = j
	}
	if len(ports) == 0 {
		for i := range out {
			out[i].Err = &AttachError{Reason: ReasonInvalidRequest, Msg: "no port given"}
		}
		return out
	}
	for _, group := range groupByNetns(jvms) {
		assignInNetns(out, group, host, ports)
	}
	return out
}

// groupByNetns returns the indexes of jvms grouped by network namespace, each group ordered oldest first. A JVM
// whose namespace cannot be read (it is gone) is a group of its own; Inject reports what happened to it.
func groupByNetns(jvms []JVM) [][]int {
	index := map[netnsID]int{}
	var groups [][]int
	for i, j := range jvms {
		id, err := netnsOf(j.PID)
		if err != nil {
			groups = append(groups, []int{i})
			continue
		}
		g, ok := index[id]
		if !ok {
			g = len(groups)
			index[id] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	for _, g := range groups {
		sort.SliceStable(g, func(a, b int) bool {
			ja, jb := jvms[g[a]], jvms[g[b]]
			if ja.StartTicks != jb.StartTicks {
				return ja.StartTicks < jb.StartTicks
			}
			return ja.PID < jb.PID
		})
	}
	return groups
}

// assignInNetns assigns ports to the JVMs of one network namespace (indexes into out, oldest first).
func assignInNetns(out []PortAssignment, group []int, host string, ports []int) {
	taken := map[int]bool{}
	for _, i := range group {
		if m, ok := readMarker(out[i].JVM); ok {
			out[i].Port = m.Port
			taken[m.Port] = true
		}
	}
	for rank, i := range group {
		if out[i].Port != 0 {
			continue
		}
		var port int
		var err error
		switch {
		case len(ports) > 1 && rank < len(ports):
			port = ports[rank]
		case len(ports) > 1:
			err = &AttachError{Reason: ReasonInvalidRequest, Msg: fmt.Sprintf(
				"%d JVMs share the network namespace of pid %d but only %d ports were given", len(group), out[i].JVM.PID, len(ports))}
		case rank == 0 && !taken[ports[0]]:
			port = ports[0] // the oldest JVM gets the port asked for, free or not, as with one JVM
		default:
			port, err = nextFreePort(out[i].JVM, host, ports[0], taken)
		}
		out[i].Port, out[i].Err = port, err
		if err == nil {
			taken[port] = true
		}
	}
}

// nextFreePort returns the lowest port from from on that is not taken and that CheckPort finds free for JVM j.
func nextFreePort(j JVM, host string, from int, taken map[int]bool) (int, error) {
	last := min(from+maxPortSearch, 65535)
	for p := from; p <= last; p++ {
		if taken[p] {
			continue
		}
		err := CheckPort(j, host, p)
		if err == nil || ReasonOf(err) != ReasonPortInUse {
			return p, nil
		}
	}
	return 0, &AttachError{Reason: ReasonPortInUse, Msg: fmt.Sprintf(
		"no free port in %d-%d in the network namespace of pid %d", from, last, j.PID)}
}

// InjectAll injects agent a into several JVMs, one after the other, each on the port AssignPorts gives it for
// ports (a.Port alone when ports is empty), and returns one result per JVM in the order of jvms. Each result's
// Port is the port that JVM's agent serves on, or was to serve on.
func (in *Injector) InjectAll(ctx context.Context, jvms []JVM, a Agent, ports ...int) []InjectResult {
	if len(ports) == 0 {
		ports = []int{a.Port}
	}
	plan := AssignPorts(jvms, a.Host, ports)
	results := make([]InjectResult, len(plan))
	for i, p := range plan {
		if p.Err != nil {
			results[i] = InjectResult{PID: p.JVM.PID, NSPID: p.JVM.NSPID, MainClass: p.JVM.MainClass, Status: OutcomeError,
				Reason: ReasonOf(p.Err), Message: p.Err.Error(), Host: a.Host, Port: p.Port, JavaVersion: p.JVM.JavaVersion,
				StartedAt: p.JVM.StartTime}
			continue
		}
		one := a
		one.Port = p.Port
		results[i] = in.Inject(ctx, p.JVM.PID, one)
	}
	return results
}
