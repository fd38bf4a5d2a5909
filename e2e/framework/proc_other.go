//go:build !linux

package framework

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// childSysProcAttr puts a child in its own process group. Outside Linux
// there is no parent-death signal: a crashed test may leave children.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// deadPort is a port on 127.0.0.1 with nothing listening. Outside Linux it
// is only free at the time it was chosen.
type deadPort struct {
	port int
}

func newDeadPort() (*deadPort, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return &deadPort{port: port}, l.Close()
}

// Close releases the port.
func (d *deadPort) Close() error { return nil }

// ProcessCPU is only implemented on Linux (/proc).
func ProcessCPU(pid int) (time.Duration, error) {
	return 0, errors.New("framework: process CPU is read from /proc, Linux only")
}

// ProcessRSS is only implemented on Linux (/proc).
func ProcessRSS(pid int) (uint64, error) {
	return 0, errors.New("framework: process RSS is read from /proc, Linux only")
}

// ProcessSyscalls is only implemented on Linux (/proc).
func ProcessSyscalls(pid int) (reads, writes uint64, err error) {
	return 0, 0, errors.New("framework: system call counts are read from /proc, Linux only")
}

// ListeningTCPPorts is only implemented on Linux (/proc).
func ListeningTCPPorts(pid int) ([]int, error) {
	return nil, errors.New("framework: listening ports are read from /proc, Linux only")
}
