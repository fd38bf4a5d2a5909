//go:build linux

package framework

import (
	"fmt"
	"os"
	"syscall"
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
