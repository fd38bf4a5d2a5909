//go:build linux

package framework

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// childSysProcAttr puts a child in its own process group (so signals reach
// everything it spawns) and asks the kernel to SIGKILL it when the thread
// that started it dies, so no child outlives a crashed test process.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// deadPort is a TCP port on 127.0.0.1 that is bound but never listened on:
// connections to it are refused, and no other socket can take it while the
// fleet holds it.
type deadPort struct {
	fd   int
	port int
}

func newDeadPort() (*deadPort, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		return nil, os.NewSyscallError("bind", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		_ = syscall.Close(fd)
		return nil, os.NewSyscallError("getsockname", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("unexpected socket address %T", sa)
	}
	return &deadPort{fd: fd, port: in4.Port}, nil
}

// Close releases the port.
func (d *deadPort) Close() error {
	return os.NewSyscallError("close", syscall.Close(d.fd))
}

// ProcessCPU returns the CPU time (user and system) process pid has used:
// in nanoseconds, the sum over its threads of the time on a CPU that
// /proc/<pid>/task/*/schedstat reports, where the kernel keeps it (a
// thread that has exited no longer counts; Go runtimes keep theirs);
// else from /proc/<pid>/stat, in the kernel's clock ticks (10 ms), too
// coarse to tell 1 ms a second from 2 over ten seconds.
func ProcessCPU(pid int) (time.Duration, error) {
	if d, err := threadsCPU(pid); err == nil {
		return d, nil
	}
	return statCPU(pid)
}

// threadsCPU sums the first field of each thread's schedstat: its time on
// a CPU, in nanoseconds.
func threadsCPU(pid int) (time.Duration, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var total time.Duration
	read := 0
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread exited since the listing
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("framework: /proc/%d/task/%s/schedstat: %w", pid, t.Name(), err)
		}
		total += time.Duration(ns)
		read++
	}
	if read == 0 {
		return 0, fmt.Errorf("framework: no schedstat for process %d", pid)
	}
	return total, nil
}

// statCPU reads utime and stime from /proc/<pid>/stat.
func statCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// fields are counted after its closing one.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("framework: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("framework: short /proc/%d/stat", pid)
	}
	var ticks uint64
	for _, v := range f[11:13] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("framework: /proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// ProcessRSS returns the resident set size of process pid in bytes, the
// VmRSS line of /proc/<pid>/status.
func ProcessRSS(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("framework: /proc/%d/status VmRSS: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("framework: no VmRSS in /proc/%d/status", pid)
}

// ProcessSyscalls returns how many read and write system calls process
// pid has made (the syscr and syscw lines of /proc/<pid>/io; reads count
// recvmsg and friends, writes sendmsg and friends). Reading another
// process's io file needs the right to ptrace it, as a parent has.
func ProcessSyscalls(pid int) (reads, writes uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for line := range strings.Lines(string(b)) {
		name, v, ok := strings.Cut(line, ":")
		if !ok || (name != "syscr" && name != "syscw") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("framework: /proc/%d/io %s: %w", pid, name, err)
		}
		if name == "syscr" {
			reads = n
		} else {
			writes = n
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("framework: no syscr and syscw in /proc/%d/io", pid)
	}
	return reads, writes, nil
}

// ListeningTCPPorts returns the TCP ports process pid listens on (IPv4
// and IPv6), from its socket descriptors and /proc/net/tcp{,6}, sorted.
func ListeningTCPPorts(pid int) ([]int, error) {
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, fmt.Errorf("framework: %w", err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(fdDir + "/" + fd.Name())
		if err != nil {
			continue // closed since the listing
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	ports := map[int]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			return nil, fmt.Errorf("framework: %w", err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: LISTEN
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			port, err := strconv.ParseUint(hexPort, 16, 16)
			if err != nil {
				return nil, fmt.Errorf("framework: /proc/%d/net/%s: local address %q", pid, table, f[1])
			}
			ports[int(port)] = true
		}
	}
	return slices.Sorted(maps.Keys(ports)), nil
}
