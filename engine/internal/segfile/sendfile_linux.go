package segfile

import (
	"io"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// SendFile copies n bytes at off of f to w with sendfile(2) when w is a
// socket (a plain TCP connection: TLS connections are not syscall.Conns)
// and f a file on disk. handled is false when it cannot, and nothing was
// written. Unlike io.Copy from an *os.File, it never moves the file's
// offset, so that concurrent readers share one descriptor.
func SendFile(w io.Writer, f vfs.File, off, n int64) (written int64, handled bool, err error) {
	sc, ok := w.(syscall.Conn)
	fd := f.Fd()
	if !ok || fd == vfs.InvalidFd {
		return 0, false, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	var werr error
	err = rc.Write(func(s uintptr) bool {
		for n > 0 {
			m, e := syscall.Sendfile(int(s), int(fd), &off, int(min(n, 1<<30)))
			if m > 0 {
				written += int64(m)
				n -= int64(m)
			}
			switch {
			case e == syscall.EAGAIN:
				return false // wait until the socket is writable
			case e == syscall.EINTR:
			case e != nil:
				werr = e
				return true
			case m == 0:
				werr = io.ErrUnexpectedEOF // the file was cut short
				return true
			}
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return written, true, err
}
