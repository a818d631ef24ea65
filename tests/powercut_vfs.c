/*
 * An SQLite VFS for the power-loss test (tests/test_power_loss.py): it wraps the default "unix"
 * VFS and records enough beside each database and WAL file to rebuild, after the writing
 * process is killed, any state the disk could hold had the machine lost power at that moment.
 *
 * A SIGKILL loses nothing the process wrote (the page cache keeps it); a power cut loses what
 * was not yet synced, in any part and order. So every write and truncation still reaches the
 * real file, and in addition:
 *
 *   <file>.powercut-pending   every write (offset, length, bytes) and truncation since the
 *                             file's last sync, in the order made;
 *   <file>.powercut-synced    the file as it was at its last completed sync: the pending
 *                             records are applied to it, and emptied, once the real sync
 *                             returns.
 *
 * The side files are never synced themselves: only the process dies, the machine does not.
 * A file's content when this process first opens it counts as synced: the test creates the log
 * and closes it cleanly (or rebuilds it) before it starts a writer.
 *
 * It also writes one line per notable step to a descriptor the test reads in order with the
 * writer's acknowledgements ("#sync wal", "#ckpt db", ...), so that the test knows which commits
 * were acknowledged after the last sync, and can cut the power in the middle of a checkpoint.
 *
 * The -shm file is not tracked: it is shared memory, which a power cut simply loses.
 *
 * Built by the test with: gcc -shared -fPIC -pthread powercut_vfs.c <the libsqlite3 that
 * Python's sqlite3 module uses>. Python's sqlite3 has no enable_load_extension, so the writer
 * loads this library with ctypes (RTLD_GLOBAL) and calls powercut_register, which makes this
 * VFS the default of the process's one copy of libsqlite3.
 */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The record header in a pending file, native byte order (the test reads it with "=IIqq"). */
#define RECORD_MAGIC 0x54554350u /* "PCUT" */
#define RECORD_WRITE 1u
#define RECORD_TRUNCATE 2u

typedef struct Record {
  uint32_t magic;
  uint32_t kind;
  int64_t offset; /* of a write; the new size of a truncation */
  int64_t amount; /* bytes that follow the header (0 for a truncation) */
} Record;

/* One per path, shared by every handle on it: SQLiteLog opens the same file from several
 * connections, and a sync through any of them makes every earlier write to the file durable.
 * Never freed, so that a later open cannot take unsynced writes for synced ones. */
typedef struct Tracked {
  char *path;
  int isWal;
  int pendingFd;
  int syncedFd;
  int dbWrittenSinceSync;
  struct Tracked *next;
} Tracked;

typedef struct PcFile {
  sqlite3_file base;
  Tracked *tracked; /* NULL for a file the model does not cover (temp files, journals) */
  sqlite3_file *real; /* the unix VFS's file, allocated right after this struct */
} PcFile;

static sqlite3_vfs *unix_vfs;
static int trace_fd = -1;
static int tracked_opens;
/* One lock for every tracked file: a write and its record, and a sync and the application of
 * the records, must not interleave, or the synced image would miss a write the sync covered. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Tracked *tracked_files;

/* One write(2) per line: lines stay whole and in order among the writer's own output. */
static void trace(const char *what, const Tracked *t) {
  char line[64];
  int n;
  if (trace_fd < 0) return;
  n = snprintf(line, sizeof line, "#%s %s\n", what, t == NULL ? "-" : (t->isWal ? "wal" : "db"));
  if (n > 0 && write(trace_fd, line, (size_t)n) < 0) abort();
}

static void write_all(int fd, const void *data, size_t size) {
  const char *p = data;
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    /* A record the test cannot trust is worse than a crash, which the test reports. */
    if (n <= 0) abort();
    p += n;
    size -= (size_t)n;
  }
}

static void pwrite_all(int fd, const void *data, size_t size, off_t offset) {
  const char *p = data;
  while (size > 0) {
    ssize_t n = pwrite(fd, p, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) abort();
    p += n;
    size -= (size_t)n;
    offset += n;
  }
}

static int open_side_file(const char *path, const char *suffix, int extra_flags) {
  size_t size = strlen(path) + strlen(suffix) + 1;
  char *name = malloc(size);
  int fd;
  if (name == NULL) abort();
  snprintf(name, size, "%s%s", path, suffix);
  fd = open(name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | extra_flags, 0644);
  if (fd < 0) abort();
  free(name);
  return fd;
}

/* Called with the lock held, on the first open of a path in this process. */
static Tracked *track(const char *path, int isWal) {
  Tracked *t;
  int source;
  char buffer[65536];
  for (t = tracked_files; t != NULL; t = t->next) {
    if (strcmp(t->path, path) == 0) return t;
  }
  t = calloc(1, sizeof *t);
  if (t == NULL || (t->path = strdup(path)) == NULL) abort();
  t->isWal = isWal;
  t->syncedFd = open_side_file(path, ".powercut-synced", 0);
  /* O_APPEND: after a sync empties the file, the next record goes to its start again. */
  t->pendingFd = open_side_file(path, ".powercut-pending", O_APPEND);
  source = open(path, O_RDONLY | O_CLOEXEC);
  if (source >= 0) {
    for (;;) {
      ssize_t n = read(source, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) abort();
      if (n == 0) break;
      write_all(t->syncedFd, buffer, (size_t)n);
    }
    close(source);
  }
  t->next = tracked_files;
  tracked_files = t;
  tracked_opens++;
  trace("open", t);
  return t;
}

static void record(Tracked *t, uint32_t kind, int64_t offset, const void *data, int64_t amount) {
  Record header = {RECORD_MAGIC, kind, offset, amount};
  /* Header and bytes in one buffer and one write, so that a kill cannot split them. */
  size_t size = sizeof header + (size_t)amount;
  char *buffer = malloc(size);
  if (buffer == NULL) abort();
  memcpy(buffer, &header, sizeof header);
  if (amount > 0) memcpy(buffer + sizeof header, data, (size_t)amount);
  write_all(t->pendingFd, buffer, size);
  free(buffer);
}

/* Called with the lock held, after the real sync returned: the pending records are durable. */
static void apply_pending(Tracked *t) {
  off_t at = 0;
  Record header;
  for (;;) {
    ssize_t n = pread(t->pendingFd, &header, sizeof header, at);
    if (n == 0) break;
    if (n != (ssize_t)sizeof header || header.magic != RECORD_MAGIC) abort();
    at += (off_t)sizeof header;
    if (header.kind == RECORD_WRITE) {
      char *data = malloc((size_t)header.amount);
      if (data == NULL) abort();
      if (pread(t->pendingFd, data, (size_t)header.amount, at) != header.amount) abort();
      pwrite_all(t->syncedFd, data, (size_t)header.amount, (off_t)header.offset);
      free(data);
      at += (off_t)header.amount;
    } else if (ftruncate(t->syncedFd, (off_t)header.offset) != 0) {
      abort();
    }
  }
  if (ftruncate(t->pendingFd, 0) != 0) abort();
}

static int pcClose(sqlite3_file *file) {
  PcFile *p = (PcFile *)file;
  return p->real->pMethods->xClose(p->real);
}

static int pcRead(sqlite3_file *file, void *data, int amount, sqlite3_int64 offset) {
  PcFile *p = (PcFile *)file;
  return p->real->pMethods->xRead(p->real, data, amount, offset);
}

static int pcWrite(sqlite3_file *file, const void *data, int amount, sqlite3_int64 offset) {
  PcFile *p = (PcFile *)file;
  Tracked *t = p->tracked;
  int rc;
  if (t == NULL) return p->real->pMethods->xWrite(p->real, data, amount, offset);
  pthread_mutex_lock(&lock);
  /* The real write first: a record of a write that never happened could be "replayed" into
   * a state no disk could hold; a write without its record is one that did not reach it. */
  rc = p->real->pMethods->xWrite(p->real, data, amount, offset);
  if (rc == SQLITE_OK) {
    record(t, RECORD_WRITE, offset, data, amount);
    /* In WAL mode the database file is written only by checkpoints. */
    if (!t->isWal && !t->dbWrittenSinceSync) {
      t->dbWrittenSinceSync = 1;
      trace("ckpt", t);
    }
    if (t->isWal && offset == 0) trace("walhdr", t);
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

static int pcTruncate(sqlite3_file *file, sqlite3_int64 size) {
  PcFile *p = (PcFile *)file;
  int rc;
  if (p->tracked == NULL) return p->real->pMethods->xTruncate(p->real, size);
  pthread_mutex_lock(&lock);
  rc = p->real->pMethods->xTruncate(p->real, size);
  if (rc == SQLITE_OK) record(p->tracked, RECORD_TRUNCATE, size, NULL, 0);
  pthread_mutex_unlock(&lock);
  return rc;
}

static int pcSync(sqlite3_file *file, int flags) {
  PcFile *p = (PcFile *)file;
  Tracked *t = p->tracked;
  int rc;
  if (t == NULL) return p->real->pMethods->xSync(p->real, flags);
  pthread_mutex_lock(&lock);
  rc = p->real->pMethods->xSync(p->real, flags);
  if (rc == SQLITE_OK) {
    apply_pending(t);
    t->dbWrittenSinceSync = 0;
    /* After the synced image is complete: a line read before it promises nothing. */
    trace("sync", t);
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

static int pcFileSize(sqlite3_file *file, sqlite3_int64 *size) {
  PcFile *p = (PcFile *)file;
  return p->real->pMethods->xFileSize(p->real, size);
}

static int pcLock(sqlite3_file *file, int level) {
  PcFile *p = (PcFile *)file;
  return p->real->pMethods->xLock(p->real, level);
}

static int pcUnlock(sqlite3_file *file, int level) {
  PcFile *p = (PcFile *)file;
  return p->real->pMethods->xUnlock(p->real, level);
}

static int pcCheckReservedLock(sqlite3_file *file, int *out) {
  PcFile *p = (PcFile *)file;
  return p->real->pMethods->xCheckReservedLock(p->real, out);
}

static int pcFileControl(sqlite3_file *file, int op, void *arg) {
  PcFile *p = (PcFile *)file;
  return p->real->pMethods->xFileControl(p->real, op, arg);
}

static int pcSectorSize(sqlite3_file *file) {
  PcFile *p = (PcFile *)file;
  return p->real->pMethods->xSectorSize(p->real);
}

static int pcDeviceCharacteristics(sqlite3_file *file) {
  PcFile *p = (PcFile *)file;
  return p->real->pMethods->xDeviceCharacteristics(p->real);
}

static int pcShmMap(sqlite3_file *file, int page, int size, int extend, void volatile **out) {
  PcFile *p = (PcFile *)file;
  return p->real->pMethods->xShmMap(p->real, page, size, extend, out);
}

static int pcShmLock(sqlite3_file *file, int offset, int n, int flags) {
  PcFile *p = (PcFile *)file;
  return p->real->pMethods->xShmLock(p->real, offset, n, flags);
}

static void pcShmBarrier(sqlite3_file *file) {
  PcFile *p = (PcFile *)file;
  p->real->pMethods->xShmBarrier(p->real);
}

static int pcShmUnmap(sqlite3_file *file, int delete_flag) {
  PcFile *p = (PcFile *)file;
  return p->real->pMethods->xShmUnmap(p->real, delete_flag);
}

/* Memory-mapped reads only: this SQLite writes through xWrite even when it maps the file. */
static int pcFetch(sqlite3_file *file, sqlite3_int64 offset, int amount, void **out) {
  PcFile *p = (PcFile *)file;
  return p->real->pMethods->xFetch(p->real, offset, amount, out);
}

static int pcUnfetch(sqlite3_file *file, sqlite3_int64 offset, void *page) {
  PcFile *p = (PcFile *)file;
  return p->real->pMethods->xUnfetch(p->real, offset, page);
}

static const sqlite3_io_methods pc_io_methods = {
    3,
    pcClose,
    pcRead,
    pcWrite,
    pcTruncate,
    pcSync,
    pcFileSize,
    pcLock,
    pcUnlock,
    pcCheckReservedLock,
    pcFileControl,
    pcSectorSize,
    pcDeviceCharacteristics,
    pcShmMap,
    pcShmLock,
    pcShmBarrier,
    pcShmUnmap,
    pcFetch,
    pcUnfetch,
};

static int pcOpen(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *file, int flags,
                  int *out_flags) {
  PcFile *p = (PcFile *)file;
  int rc;
  (void)vfs;
  p->tracked = NULL;
  p->real = (sqlite3_file *)&p[1];
  /* The name pointer is passed on as it is: SQLite finds a WAL's database from it. */
  rc = unix_vfs->xOpen(unix_vfs, name, p->real, flags, out_flags);
  /* SQLite closes a file whose open failed only if its methods are set. */
  p->base.pMethods = p->real->pMethods == NULL ? NULL : &pc_io_methods;
  if (rc != SQLITE_OK) return rc;
  if (name != NULL && (flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_WAL))) {
    pthread_mutex_lock(&lock);
    p->tracked = track(name, (flags & SQLITE_OPEN_WAL) != 0);
    pthread_mutex_unlock(&lock);
  } else if (flags & SQLITE_OPEN_MAIN_JOURNAL) {
    /* A rollback journal is outside the model; the test fails if it sees this line. */
    trace("journal", NULL);
  }
  return SQLITE_OK;
}

static int pcDelete(sqlite3_vfs *vfs, const char *name, int sync_dir) {
  Tracked *t;
  (void)vfs;
  pthread_mutex_lock(&lock);
  for (t = tracked_files; t != NULL; t = t->next) {
    /* Deleting a tracked file is outside the model too (SQLite does it only on a clean close). */
    if (strcmp(t->path, name) == 0) trace("delete", t);
  }
  pthread_mutex_unlock(&lock);
  return unix_vfs->xDelete(unix_vfs, name, sync_dir);
}

static int pcAccess(sqlite3_vfs *vfs, const char *name, int flags, int *out) {
  (void)vfs;
  return unix_vfs->xAccess(unix_vfs, name, flags, out);
}

static int pcFullPathname(sqlite3_vfs *vfs, const char *name, int size, char *out) {
  (void)vfs;
  return unix_vfs->xFullPathname(unix_vfs, name, size, out);
}

static void *pcDlOpen(sqlite3_vfs *vfs, const char *name) {
  (void)vfs;
  return unix_vfs->xDlOpen(unix_vfs, name);
}

static void pcDlError(sqlite3_vfs *vfs, int size, char *out) {
  (void)vfs;
  unix_vfs->xDlError(unix_vfs, size, out);
}

static void (*pcDlSym(sqlite3_vfs *vfs, void *handle, const char *symbol))(void) {
  (void)vfs;
  return unix_vfs->xDlSym(unix_vfs, handle, symbol);
}

static void pcDlClose(sqlite3_vfs *vfs, void *handle) {
  (void)vfs;
  unix_vfs->xDlClose(unix_vfs, handle);
}

static int pcRandomness(sqlite3_vfs *vfs, int size, char *out) {
  (void)vfs;
  return unix_vfs->xRandomness(unix_vfs, size, out);
}

static int pcSleep(sqlite3_vfs *vfs, int microseconds) {
  (void)vfs;
  return unix_vfs->xSleep(unix_vfs, microseconds);
}

static int pcCurrentTime(sqlite3_vfs *vfs, double *out) {
  (void)vfs;
  return unix_vfs->xCurrentTime(unix_vfs, out);
}

static int pcGetLastError(sqlite3_vfs *vfs, int size, char *out) {
  (void)vfs;
  return unix_vfs->xGetLastError(unix_vfs, size, out);
}

static int pcCurrentTimeInt64(sqlite3_vfs *vfs, sqlite3_int64 *out) {
  (void)vfs;
  return unix_vfs->xCurrentTimeInt64(unix_vfs, out);
}

/* Version 2: the system-call overrides (xSetSystemCall, ...) are left out, as nothing uses them. */
static sqlite3_vfs powercut_vfs = {
    2,
    0, /* szOsFile, set on registration */
    0, /* mxPathname, likewise */
    NULL,
    "powercut",
    NULL,
    pcOpen,
    pcDelete,
    pcAccess,
    pcFullPathname,
    pcDlOpen,
    pcDlError,
    pcDlSym,
    pcDlClose,
    pcRandomness,
    pcSleep,
    pcCurrentTime,
    pcGetLastError,
    pcCurrentTimeInt64,
    NULL,
    NULL,
    NULL,
};

/* Makes this VFS the default, tracing to ``fd``. Returns an SQLite result code. */
int powercut_register(int fd) {
  if (unix_vfs != NULL) return SQLITE_MISUSE;
  unix_vfs = sqlite3_vfs_find("unix");
  if (unix_vfs == NULL) return SQLITE_NOTFOUND;
  trace_fd = fd;
  powercut_vfs.szOsFile = (int)sizeof(PcFile) + unix_vfs->szOsFile;
  powercut_vfs.mxPathname = unix_vfs->mxPathname;
  return sqlite3_vfs_register(&powercut_vfs, 1);
}

/* How many files the VFS has taken in: 0 after an open means another SQLite served it. */
int powercut_tracked_opens(void) {
  int n;
  pthread_mutex_lock(&lock);
  n = tracked_opens;
  pthread_mutex_unlock(&lock);
  return n;
}
