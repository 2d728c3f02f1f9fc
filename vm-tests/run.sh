#!/bin/bash
# VM tests: boot Debian's cloud kernel in QEMU with an initramfs built by dracut with our module,
# let the agent provision a blank virtio disk at first boot, then check the disk image from the
# host with the host's own tools.
#
#   vm-tests/run.sh [SCENARIO...]      (default: every directory in vm-tests/scenarios/)
#
# Environment:
#   AGENT_BIN     static agent binary (default: target/x86_64-unknown-linux-gnu/release/agent)
#   VM_CACHE      kernel, initramfs and work files (default: target/vm)
#   VM_KEEP=1     keep each scenario's disk image and logs
#   VM_JOBS       scenarios booted at the same time (default 2)
#   VM_TIMEOUT    seconds per boot (default 300; scenario.conf may set TIMEOUT)
#   VM_SELFTEST=1 run vm-tests/selftest/ (boot machinery alone, AGENT_BIN=vm-tests/selftest/agent-stub)
#   AGENT_SERVE   command line template for the config server; @SOURCE@, @ADDR@, @PORT@ and @STATE@
#                 (the scenario's $WORK/serve-state) are replaced (default: "$AGENT_BIN serve
#                 --source @SOURCE@ --listen-http @ADDR@ --state-dir @STATE@ --admin-listen
#                 127.0.0.1:0": its own state and inventory, its admin listener on a free port,
#                 never the default 127.0.0.1:22625 or /var/lib/agent-serve)
#
# A scenario is a directory vm-tests/scenarios/NAME/ with:
#   scenario.conf  shell variables: MODE (fwcfg|url|none), FWCFG=1 (url mode: config.ign via
#                  fw_cfg as well), EXPECT (success|emergency), BOOTS, DISK_MIB, PLATFORM, POOL,
#                  NEED_TOKEN=1 (read the pool's bearer token), SERVE_CMD (server command
#                  template, default AGENT_SERVE), CMDLINE (extra kernel arguments),
#                  TIMEOUT, EXTRA_DISKS (sizes in MiB of more blank virtio disks: vdb, vdc, ...;
#                  their images are $DISK2, $DISK3, ... in prepare/before/check scripts),
#                  TANG=1 (MODE=url: a tang server, Debian's tangd run per connection by
#                  guestfwd, at 10.0.2.101:80 as the guest sees it; keys in $WORK/tang),
#                  NET (MODE=url: the user network's prefix, QEMU's net=, default
#                  10.0.2.0/24), GUEST_SERVER (MODE=url: the address:port at which the guest
#                  reaches the server, inside NET; default 10.0.2.100:8080), e.g. NET=
#                  169.254.169.0/24 GUEST_SERVER=169.254.169.254:80 for a metadata service,
#                  CDROM (an image attached read-only as an IDE CD-ROM, /dev/sr0: a path, relative
#                  ones in $WORK; prepare.sh or beforeN.sh makes it, e.g. a config drive ISO)
#                  TPM=1 (a software TPM 2.0: Debian's swtpm, its state in $WORK/tpm, attached as
#                  tpm-tis; a beforeN.sh that moves $WORK/tpm away gives boot N a TPM whose
#                  state was reset; swtpm's log in $WORK/swtpm.log)
#                  Per boot N (several machines in one scenario): CMDLINE_N (more kernel
#                  arguments), SMBIOS_N (QEMU's -smbios type=1 fields: uuid=...,serial=...),
#                  MAC_N (the NIC's MAC address), DISK_N (the disk image's name in $WORK, made
#                  blank at DISK_MIB on first use; default disk.img, which is $DISK), EXPECT_N
#                  (success|emergency|local|os|installed; default success, EXPECT for the
#                  last boot); a DISK_N machine's EXTRA_DISKS are its own (DISK_N's name + 2,
#                  3, ...)
#                  NETBOOT=1 (MODE=url: the firmware boots from the network, no -kernel: SeaBIOS,
#                  then iPXE (the ipxe-qemu ROM of virtio-net-pci) gets BOOTFILE (default
#                  /boot.ipxe; BOOTFILE_N per boot) at the guest server by slirp's DHCP, then
#                  the disk (-boot order=nc); SeaBIOS's serial console puts the firmware's and
#                  iPXE's output in the console log. The harness hard-links the test kernel and
#                  initramfs as serve/boot/assets/vmlinuz and initramfs.img, and fills
#                  @KERNEL_ARGS@ (the arguments of every boot, space-separated) and
#                  @KERNEL_ARGS_JSON@ ("a", "b", ... for a JSON list) in serve/'s text files.
#                  EXPECT_N=local: the machine must not start a kernel but go on to its disk
#                  (iPXE's `exit`): QEMU is ended once the console shows SeaBIOS's "Booting from
#                  Hard Disk" (a disk without boot code hangs there), and the disk must be
#                  bit-for-bit unchanged.
#                  DISKBOOT=1: the firmware boots the disk's own boot loader (no -kernel): an
#                  OS image that prepare.sh writes to $DISK (vm-tests/os-image.sh); SeaBIOS's
#                  serial console as with NETBOOT. EXPECT_N=os: the booted OS printed
#                  OS-IMAGE-UP on the console (and no stage failed); check.sh checks the rest
#                  ($WORK/consoleN.log). With NETBOOT, EXPECT_N=os is a machine that iPXE
#                  sends on to its disk, whose OS boots.
#                  EXPECT_N=installed: a live install (agent-install.service, from a boot
#                  profile's `install` section): the console shows `agent install`'s
#                  "installed to /dev/..." and its reboot, which ends QEMU (-no-reboot).
#                  EXPECT_N=cut with STOP_AT_N=TEXT: a power cut, QEMU killed as soon as the
#                  console shows TEXT (the boot must get that far).
#                  prepare.sh may leave more boot assets in $WORK/assets/ (linked into
#                  serve/boot/assets/) and NAME=value lines in $WORK/serve.env (@NAME@ in
#                  serve/'s text files becomes the value).
#   config.ign     the config (configN.ign for boot N if present); "@TOKEN@" and "@SERVER@" are
#                  replaced by the pool's bearer token and the server's address as the guest sees it
#   serve/         (MODE=url) the config server's source directory (pools/<pool>.ign, ...);
#                  "@SERVER@" in its text files is replaced as in config.ign
#   prepare.sh     (optional) run on the host before the first boot: "$DISK" is the image
#   beforeN.sh     (optional) run on the host before boot N (N >= 2)
#   check.sh       run on the host after the last boot, with lib.sh's helpers; fails = non-zero
# The server's log during boot N is kept as $WORK/serverN.log (agent serve: one JSON access log
# line per request), e.g. to check that a boot fetched no config.
# beforeN.sh and check.sh run while the config server runs (MODE=url); with
# agent serve's admin listener, $ADMIN_URL is its address (http://127.0.0.1:PORT, for
# `$AGENT_BIN machines list --server "$ADMIN_URL"`), else empty; $SERVER_URL is the server as the
# host reaches it (http://127.0.0.1:PORT).
# Output: one line per scenario, then "N passed, M failed" and the boot-time/size benchmark.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
export VM_CACHE=${VM_CACHE:-$top/target/vm}
export AGENT_BIN=${AGENT_BIN:-$top/target/x86_64-unknown-linux-gnu/release/agent}
mkdir -p "$VM_CACHE"

log() { echo "vm-test: $*" >&2; }
calc() { awk "BEGIN { print $* }"; }
die() { log "error: $*"; exit 2; }

# --- host-side checks of the module (no VM) ------------------------------------------------------
"$here/test-generator.sh" || die "generator test failed"

# --- prerequisites -----------------------------------------------------------------------------
kver=$("$here/setup.sh" | tail -n1)
kroot=$VM_CACHE/kernel/$kver
kernel=$kroot/boot/vmlinuz-$kver
moddir=$kroot/lib/modules/$kver
[[ -d $moddir ]] || moddir=$kroot/usr/lib/modules/$kver
[[ -r $kernel ]] || die "kernel $kernel missing"
[[ -x $AGENT_BIN ]] || die "agent binary $AGENT_BIN missing (make static)"
[[ ${VM_SELFTEST:-} == 1 ]] || file -L "$AGENT_BIN" | grep -Eq 'statically linked|static-pie linked' ||
    die "$AGENT_BIN is not statically linked: $(file -L "$AGENT_BIN")"

# --- initramfs ---------------------------------------------------------------------------------
t0=$(date +%s.%N)
initrd=$(AGENT_BIN=$AGENT_BIN "$here/initramfs.sh" --variant test "$kver")
t1=$(date +%s.%N)
# For the size benchmark: the same initramfs with the agent module alone (no test hook, whose
# self-test tools would count) and without it.
initrd_ref=
initrd_agent=
if [[ ${VM_SKIP_REFERENCE:-} != 1 ]]; then
    AGENT_BIN=$AGENT_BIN "$here/initramfs.sh" --variant agent "$kver" >"$VM_CACHE/initrd-agent.path" &
    agent_pid=$!
    initrd_ref=$(AGENT_BIN=$AGENT_BIN "$here/initramfs.sh" --variant reference "$kver")
    wait "$agent_pid" || die "building the agent-only initramfs failed"
    initrd_agent=$(cat "$VM_CACHE/initrd-agent.path")
fi
log "initramfs built in $(printf %.1f "$(calc "$t1 - $t0")") s: $initrd"

# --- config server -----------------------------------------------------------------------------
server_pid=
cleanup() {
    if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; fi
    wait 2>/dev/null || true
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start_server() { # SOURCE_DIR LOG STATE_DIR -> sets server_port, server_pid, ADMIN_URL
    local src=$1 slog=$2 state=$3 cmd i
    server_port=$(free_port)
    cmd=${SERVE_CMD:-${AGENT_SERVE:-"$AGENT_BIN serve --source @SOURCE@ --listen-http @ADDR@ --state-dir @STATE@ --admin-listen 127.0.0.1:0"}}
    cmd=${cmd//@SOURCE@/$src}
    cmd=${cmd//@PORT@/$server_port}
    cmd=${cmd//@ADDR@/127.0.0.1:$server_port}
    cmd=${cmd//@STATE@/$state}
    ADMIN_URL=
    # shellcheck disable=SC2086
    $cmd >"$slog" 2>&1 &
    server_pid=$!
    for i in $(seq 1 100); do
        if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$server_port),1)" \
            2>/dev/null; then
            # agent serve prints "listening admin http://ADDR" when it binds its listeners.
            ADMIN_URL=$(grep -ao -m1 'listening admin http://[^ ]*' "$slog" | sed 's/.* //' || true)
            SERVER_URL=http://127.0.0.1:$server_port
            export ADMIN_URL SERVER_URL
            return 0
        fi
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    log "config server did not start: $(tail -n5 "$slog")"
    return 1
}

stop_server() {
    [[ -n $server_pid ]] || return 0
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
}

pool_token() { # STATE_DIR POOL: the plaintext token the server published for the pool
    local f i
    for i in $(seq 1 50); do
        for f in "$1/tokens/$2.token" "$1/tokens/..data/$2.token"; do
            if [[ -s $f ]]; then tr -d '\n' <"$f"; return 0; fi
        done
        sleep 0.1
    done
    return 1
}

# --- one boot ----------------------------------------------------------------------------------
# Where the guest reaches the config server (a scenario may set GUEST_SERVER and NET).
guest_server=10.0.2.100:8080
# SeaBIOS's serial console (NETBOOT): fw_cfg etc/sercon-port, a little-endian I/O port, ttyS0's.
printf '\xf8\x03' >"$VM_CACHE/sercon-port"

# The kernel arguments of every boot (NETBOOT: through serve/'s @KERNEL_ARGS@).
base_args() {
    echo "console=ttyS0,115200 root=LABEL=root rd.emergency=poweroff rd.shell=0" \
        "agent.firstboot agent.platform.id=$PLATFORM printk.devkmsg=on panic=-1" \
        "systemd.show_status=1 rd.udev.log_level=err loglevel=4"
}
boot() { # DISK CONFIG_OR_EMPTY CONSOLE_LOG N [STOP_AT] -> exit status of QEMU (124 = timed out)
    local disk=$1 cfg=$2 console=$3 n=$4 stop_at=${5:-}
    # Boot N's own machine: kernel arguments, SMBIOS identity, MAC (scenario.conf's *_N).
    local v_cmdline=CMDLINE_$n v_smbios=SMBIOS_$n v_mac=MAC_$n v_bootfile=BOOTFILE_$n
    local cmdline_n=${!v_cmdline:-} smbios=${!v_smbios:-} mac=${!v_mac:-}
    local bootfile=${!v_bootfile:-${BOOTFILE:-/boot.ipxe}}
    cmdline_n=${cmdline_n//@SERVER@/$guest_server}
    local append
    append="$(base_args) $CMDLINE $cmdline_n"
    local args=(-accel tcg -cpu max -m 1024 -smp 1 -nodefaults -no-reboot
        -display none -serial "file:$console"
        -drive "file=$disk,if=virtio,format=raw,cache=unsafe"
        -device virtio-rng-pci)
    if [[ -n ${NETBOOT:-} ]]; then
        # The firmware boots: the network first, then the disk; a failed boot ends QEMU
        # (reboot-timeout=0 with -no-reboot). (QEMU warns that the name lacks "opt/".)
        args+=(-boot order=nc,reboot-timeout=0 -fw_cfg "name=etc/sercon-port,file=$VM_CACHE/sercon-port")
    elif [[ -n ${DISKBOOT:-} ]]; then
        # The disk's boot loader starts its own kernel and initramfs (an OS image).
        args+=(-boot order=c,reboot-timeout=0 -fw_cfg "name=etc/sercon-port,file=$VM_CACHE/sercon-port")
    else
        args+=(-kernel "$kernel" -initrd "$initrd" -append "$append")
    fi
    [[ -z $smbios ]] || args+=(-smbios "type=1,$smbios")
    local i=2 extra
    for extra in ${EXTRA_DISKS:-}; do
        # Each machine's own: made blank at first use (DISK_N's extras are DISK_N's name + i).
        [[ -e ${disk%.img}$i.img ]] || truncate -s "${extra}M" "${disk%.img}$i.img"
        args+=(-drive "file=${disk%.img}$i.img,if=virtio,format=raw,cache=unsafe")
        i=$((i + 1))
    done
    if [[ -n ${CDROM:-} ]]; then
        local cd=$CDROM
        [[ $cd == /* ]] || cd=$WORK/$cd
        args+=(-drive "file=$cd,if=ide,media=cdrom,readonly=on,format=raw")
    fi
    if [[ ($MODE == fwcfg || -n $FWCFG) && -n $cfg ]]; then
        args+=(-fw_cfg "name=opt/com.coreos/config,file=$cfg")
    fi
    if [[ $MODE == url ]]; then
        # guestfwd with cmd: runs one socat per guest connection, so several requests work and
        # the server closing its end closes the guest's (a tcp: chardev is a single stream).
        local netdev="user,id=n0,restrict=on${NET:+,net=$NET}"
        # slirp's DHCP names iPXE's script (an http URL: iPXE fetches it through the guestfwd).
        [[ -z ${NETBOOT:-} ]] || netdev+=",bootfile=http://$guest_server$bootfile"
        netdev+=",guestfwd=tcp:$guest_server-cmd:socat - TCP:127.0.0.1:$server_port"
        if [[ -n ${TANG:-} ]]; then
            netdev+=",guestfwd=tcp:10.0.2.101:80-cmd:$WORK/tangd.sh"
        fi
        args+=(-netdev "$netdev" -device "virtio-net-pci,netdev=n0${mac:+,mac=$mac}")
    fi
    local tpm_pid=
    if [[ -n ${TPM:-} ]]; then
        # One swtpm per boot on a fresh control socket; --terminate: it exits when QEMU
        # closes the connection. Its state (keys, seeds) persists in $WORK/tpm across boots.
        mkdir -p "$WORK/tpm"
        rm -f "$WORK/tpm.sock"
        swtpm socket --tpm2 --tpmstate "dir=$WORK/tpm" --ctrl "type=unixio,path=$WORK/tpm.sock" \
            --terminate --log "file=$WORK/swtpm.log" </dev/null >>"$WORK/swtpm.log" 2>&1 &
        tpm_pid=$!
        for i in $(seq 1 100); do [[ -S $WORK/tpm.sock ]] && break; sleep 0.05; done
        [[ -S $WORK/tpm.sock ]] || { kill "$tpm_pid" 2>/dev/null; return 1; }
        args+=(-chardev "socket,id=chrtpm,path=$WORK/tpm.sock"
            -tpmdev emulator,id=tpm0,chardev=chrtpm -device tpm-tis,tpmdev=tpm0)
    fi
    local rc=0
    if [[ -z $stop_at ]]; then
        timeout "${TIMEOUT}" qemu-system-x86_64 "${args[@]}" </dev/null >"$console.qemu" 2>&1 || rc=$?
    else
        # Ends QEMU once the console shows STOP_AT (e.g. the firmware going on to a disk whose
        # boot code, none, hangs the machine), or when it ends by itself.
        rm -f "$console.pid"
        timeout "${TIMEOUT}" qemu-system-x86_64 "${args[@]}" -pidfile "$console.pid" \
            </dev/null >"$console.qemu" 2>&1 &
        local qpid=$!
        while kill -0 "$qpid" 2>/dev/null; do
            if grep -aq -- "$stop_at" "$console" 2>/dev/null; then
                kill "$(cat "$console.pid")" 2>/dev/null || true
                break
            fi
            sleep 0.2
        done
        wait "$qpid" || rc=$?
        if [[ $rc -ne 124 ]] && grep -aq -- "$stop_at" "$console"; then rc=0; fi
    fi
    if [[ -n $tpm_pid ]]; then
        kill "$tpm_pid" 2>/dev/null || true
        wait "$tpm_pid" 2>/dev/null || true
    fi
    return $rc
}

# --- scenarios ---------------------------------------------------------------------------------
scenario_dir=$here/scenarios
[[ ${VM_SELFTEST:-} == 1 ]] && scenario_dir=$here/selftest
if [[ $# -gt 0 ]]; then
    scenarios=("$@")
else
    scenarios=()
    for d in "$scenario_dir"/*/; do scenarios+=("$(basename "$d")"); done
fi

# One scenario, in a subshell; leaves $work/ok or $work/reason.
run_scenario() {
    local name=$1 sdir=$scenario_dir/$1 work=$VM_CACHE/work/$1
    (
        trap stop_server EXIT
        set -a
        ADMIN_URL=
        NETBOOT= BOOTFILE= DISKBOOT=
        MODE=fwcfg FWCFG= EXPECT=success BOOTS=1 DISK_MIB=2048 PLATFORM=qemu POOL=worker CMDLINE=""
        NEED_TOKEN= SERVE_CMD= TIMEOUT=${VM_TIMEOUT:-300} EXTRA_DISKS= TANG= CDROM= TPM=
        NET= GUEST_SERVER=10.0.2.100:8080
        # shellcheck disable=SC1091
        source "$sdir/scenario.conf"
        set +a
        guest_server=$GUEST_SERVER
        export DISK=$work/disk.img WORK=$work SCENARIO=$sdir
        truncate -s "${DISK_MIB}M" "$DISK"
        i=2
        for mib in $EXTRA_DISKS; do
            export "DISK$i=$work/disk$i.img"
            truncate -s "${mib}M" "$work/disk$i.img"
            i=$((i + 1))
        done
        if [[ -x $sdir/prepare.sh ]]; then "$sdir/prepare.sh" >"$work/prepare.log" 2>&1 ||
            { echo "prepare.sh failed: $(tail -n3 "$work/prepare.log")" >"$work/reason"; exit 1; }
        fi
        if [[ -n $TANG ]]; then
            mkdir -p "$work/tang"
            /usr/libexec/tangd-keygen "$work/tang" ||
                { echo "tangd-keygen failed (apt-get install tang)" >"$work/reason"; exit 1; }
            # slirp gives the command the connection as stderr too: tangd's log line would
            # land in front of its (buffered) response.
            printf '#!/bin/sh\nexec /usr/libexec/tangd "%s/tang" 2>>"%s/tangd.log"\n' \
                "$work" "$work" >"$work/tangd.sh"
            chmod 755 "$work/tangd.sh"
        fi
        sum_before=$(sha256sum "$DISK" | cut -d' ' -f1)
        token=
        if [[ $MODE == url ]]; then
            cp -a "$sdir/serve" "$work/serve"
            if [[ -n $TANG ]]; then
                # The config pins the tang server's signing key (Ignition requires a
                # thumbprint): the one this run's tangd-keygen made.
                thp=
                for k in "$work"/tang/*.jwk; do
                    if grep -q '"sign"' "$k"; then
                        thp=$(jose jwk thp -i "$k")
                    fi
                done
                [[ -n $thp ]] || { echo "no tang signing key in $work/tang" >"$work/reason"; exit 1; }
                find "$work/serve" -type f -exec sed -i "s|@TANG_THP@|$thp|g" {} +
            fi
            if [[ -n $NETBOOT ]]; then
                # The test kernel and initramfs as the server's boot assets (hard links: the
                # same file system as the cache, no copy).
                mkdir -p "$work/serve/boot/assets"
                ln -f "$kernel" "$work/serve/boot/assets/vmlinuz" 2>/dev/null ||
                    cp "$kernel" "$work/serve/boot/assets/vmlinuz"
                ln -f "$initrd" "$work/serve/boot/assets/initramfs.img" 2>/dev/null ||
                    cp "$initrd" "$work/serve/boot/assets/initramfs.img"
            fi
            # More boot assets prepare.sh made (e.g. an OS image to install).
            if [[ -d $work/assets ]]; then
                mkdir -p "$work/serve/boot/assets"
                cp -al "$work/assets/." "$work/serve/boot/assets/"
            fi
            # Values prepare.sh computed (NAME=value lines): @NAME@ in serve/.
            if [[ -f $work/serve.env ]]; then
                while IFS='=' read -r k v; do
                    [[ $k =~ ^[A-Z][A-Z0-9_]*$ ]] || continue
                    find "$work/serve" -path "$work/serve/boot/assets" -prune -o -type f -print0 |
                        xargs -0 -r sed -i "s|@$k@|$v|g"
                done <"$work/serve.env"
            fi
            kargs="$(base_args) ${CMDLINE//@SERVER@/$guest_server}"
            # shellcheck disable=SC2086
            kjson=$(python3 -c 'import json, sys; print(", ".join(json.dumps(a) for a in sys.argv[1:]))' $kargs)
            find "$work/serve" -path "$work/serve/boot/assets" -prune -o -type f -print0 |
                xargs -0 -r sed -i -e "s|@SERVER@|$guest_server|g" -e "s|@KERNEL_ARGS_JSON@|$kjson|g" \
                    -e "s|@KERNEL_ARGS@|$kargs|g"
            start_server "$work/serve" "$work/server.log" "$work/serve-state" ||
                { echo "config server did not start" >"$work/reason"; exit 1; }
            if [[ -n ${NEED_TOKEN:-} ]]; then
                token=$(pool_token "$work/serve-state" "$POOL") ||
                    { echo "server published no token for pool $POOL" >"$work/reason"; exit 1; }
            fi
            CMDLINE=${CMDLINE//@SERVER@/$guest_server}
        fi
        total_boot=0
        for n in $(seq 1 "$BOOTS"); do
            cfg=
            for c in "$sdir/config$n.ign" "$sdir/config.ign"; do
                if [[ -e $c ]]; then cfg=$c; break; fi
            done
            if [[ -n $cfg ]]; then
                sed -e "s|@TOKEN@|$token|g" -e "s|@SERVER@|$guest_server|g" "$cfg" >"$work/config$n.ign"
                cfg=$work/config$n.ign
            fi
            if [[ -x $sdir/before$n.sh ]]; then
                "$sdir/before$n.sh" >"$work/before$n.log" 2>&1 ||
                    { echo "before$n.sh failed" >"$work/reason"; exit 1; }
            fi
            console=$work/console$n.log
            v=DISK_$n
            disk_n=$DISK
            if [[ -n ${!v:-} ]]; then
                disk_n=$work/${!v}
                [[ -e $disk_n ]] || truncate -s "${DISK_MIB}M" "$disk_n"
            fi
            v=EXPECT_$n
            expect_n=success
            [[ $n -eq $BOOTS ]] && expect_n=$EXPECT
            expect_n=${!v:-$expect_n}
            stop_at=
            if [[ $expect_n == local ]]; then
                stop_at="Booting from Hard Disk"
                sum_n=$(sha256sum "$disk_n" | cut -d' ' -f1)
            fi
            # EXPECT_N=cut: the power is cut (QEMU killed) once the console shows STOP_AT_N.
            v=STOP_AT_$n
            if [[ $expect_n == cut ]]; then
                stop_at=${!v:-}
                [[ -n $stop_at ]] || { echo "boot $n: EXPECT_$n=cut without STOP_AT_$n" >"$work/reason"; exit 1; }
            fi
            log_off=$(stat -c %s "$work/server.log" 2>/dev/null || echo 0)
            s=$(date +%s.%N)
            rc=0
            boot "$disk_n" "$cfg" "$console" "$n" "$stop_at" || rc=$?
            e=$(date +%s.%N)
            if [[ -e $work/server.log ]]; then
                tail -c +$((log_off + 1)) "$work/server.log" >"$work/server$n.log"
            fi
            total_boot=$(calc "$total_boot + $e - $s")
            echo "$total_boot" >"$work/boot_s"
            printf '%.0f\n' "$(calc "$e - $s")" >>"$work/boot_each"
            if [[ $rc -eq 124 ]]; then
                echo "boot $n timed out after ${TIMEOUT}s" >"$work/reason"; exit 1
            elif [[ $rc -ne 0 ]]; then
                echo "qemu exited $rc on boot $n: $(tail -n3 "$console.qemu")" >"$work/reason"; exit 1
            fi
            done_line=$(grep -a 'AGENT-TEST-DONE' "$console" | tail -n1 || true)
            if [[ $expect_n == cut ]]; then
                # boot() ends QEMU at the line (rc 0), or QEMU ended before it.
                grep -aq -- "$stop_at" "$console" ||
                    { echo "boot $n ended before the power cut at '$stop_at'" >"$work/reason"; exit 1; }
            elif [[ $expect_n == local ]]; then
                # Sent on to the local disk: the firmware tried it, no kernel ran, nothing changed.
                grep -aqE 'Booting from Hard Disk|No bootable device' "$console" ||
                    { echo "boot $n: the firmware did not go on to the disk" >"$work/reason"; exit 1; }
                if grep -aqE 'AGENT-TEST-DONE|AGENT-FAILED|Welcome to' "$console"; then
                    echo "boot $n: a kernel and initramfs ran, expected a local boot" >"$work/reason"
                    exit 1
                fi
                [[ $(sha256sum "$disk_n" | cut -d' ' -f1) == "$sum_n" ]] ||
                    { echo "boot $n: the disk changed during a local boot" >"$work/reason"; exit 1; }
            elif [[ $expect_n == installed ]]; then
                # A live install (agent-install.service): the image written, the config placed,
                # then the reboot, which ends QEMU (-no-reboot).
                if grep -aq 'AGENT-FAILED:' "$console"; then
                    why=$(grep -a -m1 -o 'AGENT-FAILED: [^ ]* failed' "$console" || true)
                    err=$(grep -a -m1 -o 'agent\[[a-z]*\] error: .*' "$console" | cut -c1-160 || true)
                    echo "boot $n: the install failed ($why${err:+: $err})" >"$work/reason"; exit 1
                fi
                grep -aq 'agent\[install\] info: installed to /dev/' "$console" ||
                    { echo "boot $n: no 'installed to' from agent install on the console" >"$work/reason"; exit 1; }
                grep -aq 'rebooting (coreos.inst.skip_reboot not given)' "$console" ||
                    { echo "boot $n: agent install did not reboot" >"$work/reason"; exit 1; }
            elif [[ $expect_n == os ]]; then
                # An OS image booted from its disk: it came up (check.sh checks the rest).
                if grep -aq 'AGENT-FAILED:' "$console"; then
                    why=$(grep -a -m1 -o 'AGENT-FAILED: [^ ]* failed' "$console" || true)
                    echo "boot $n: provisioning failed ($why)" >"$work/reason"; exit 1
                fi
                grep -aq 'OS-IMAGE-UP boot_id=' "$console" ||
                    { echo "boot $n: the OS did not come up (no OS-IMAGE-UP on the console)" >"$work/reason"; exit 1; }
            elif [[ $expect_n == success ]]; then
                if [[ $done_line != *complete=yes* ]]; then
                    why=$(grep -a -m1 -o 'AGENT-FAILED: [^ ]* failed' "$console" || true)
                    err=$(grep -a -m1 -o 'agent\[[a-z]*\] error: .*' "$console" | cut -c1-160 || true)
                    echo "boot $n did not complete provisioning${why:+ ($why${err:+: $err})}" >"$work/reason"
                    exit 1
                fi
                f=$(sed -n 's/.*files_end_ms=\([0-9]*\).*/\1/p' <<<"$done_line")
                echo "$f" >"$work/files_end_ms$n"
                grep -a 'AGENT-TEST-TIMES' "$console" | tail -n1 | tr -d '\r' |
                    sed 's/.*AGENT-TEST-TIMES *//' >"$work/times$n" || true
            else
                if [[ $done_line == *complete=yes* ]]; then
                    echo "boot $n completed provisioning, expected the emergency target" >"$work/reason"
                    exit 1
                fi
                grep -aq 'AGENT-FAILED:' "$console" ||
                    { echo "boot $n: no failed stage reported on the console" >"$work/reason"; exit 1; }
            fi
        done
        export CONSOLE=$work/console$BOOTS.log SUM_BEFORE=$sum_before AGENT_BIN
        if ! (cd "$work" && bash -c "set -euo pipefail; source '$here/lib.sh'; source '$sdir/check.sh'") \
            >"$work/check.log" 2>&1; then
            echo "check failed: $(tail -n3 "$work/check.log" | tr '\n' ' ')" >"$work/reason"
            exit 1
        fi
        stop_server
    ) && : >"$work/ok"
}

for name in "${scenarios[@]}"; do
    [[ -d $scenario_dir/$name ]] || die "no scenario $name"
    rm -rf "$VM_CACHE/work/$name"
    mkdir -p "$VM_CACHE/work/$name"
done
# Boots in parallel (each QEMU is one TCG thread): VM_JOBS at a time, default 2.
jobs_max=${VM_JOBS:-2}
pids=()
for name in "${scenarios[@]}"; do
    while [[ $(jobs -rp | wc -l) -ge $jobs_max ]]; do wait -n || true; done
    run_scenario "$name" &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done

# stage_times TIMES_FILE FILES_END_MS: one line of the agent's stage times in one boot, from the
# test hook's "unit=<activation start>,<agent start>,<agent exit>,<active>" (CLOCK_MONOTONIC us).
# Each stage is the agent's own run (ExecStart); "+net" is the network bring-up before the online
# fetch, "+udev" the udev trigger/settle after disks; "stages" is the window from the first stage's
# activation to the last one's end; "of" the time from kernel start to the end of the files stage.
stage_times() {
    awk -v fe="${2:-0}" '{
        total = 0; first = 0; last = 0; out = ""
        for (i = 1; i <= NF; i++) {
            split($i, kv, "="); split(kv[2], t, ",")
            if (t[2] == 0) continue
            name = kv[1]; d = (t[3] - t[2]) / 1e6
            if (name == "firstboot-done") name = "firstboot"; else total += d
            out = out sprintf("%s %.2fs ", name, d)
            if (name == "fetch") out = out sprintf("(+net %.2fs) ", (t[2] - t[1]) / 1e6)
            if (name == "disks") out = out sprintf("(+udev %.2fs) ", (t[4] - t[3]) / 1e6)
            if (first == 0 || (t[1] > 0 && t[1] < first)) first = t[1]
            if (t[4] > last) last = t[4]
        }
        printf "%s(agent total %.2fs; stages %.1f-%.1fs) of %.1fs\n", out, total, first / 1e6, last / 1e6, fe / 1000
    }' "$1"
}

passed=0
failed=0
for name in "${scenarios[@]}"; do
    work=$VM_CACHE/work/$name
    ok=0
    [[ -e $work/ok ]] && ok=1
    boot_s=$(cat "$work/boot_s" 2>/dev/null || echo 0)
    fe=$(cat "$work"/files_end_ms* 2>/dev/null | tr '\n' ' ' || true)
    timing="boot ${boot_s%.*}s"
    each=$(paste -sd+ "$work/boot_each" 2>/dev/null || true)
    [[ $each == *+* ]] && timing+=" ($each)"
    [[ -n $fe ]] && timing+=", kernel start to end of files stage: $(for x in $fe; do printf '%.1fs ' "$(calc "$x/1000")"; done)"
    if [[ $ok == 1 ]]; then
        passed=$((passed + 1))
        printf 'PASS %-22s %s\n' "$name" "$timing"
    else
        failed=$((failed + 1))
        printf 'FAIL %-22s %s: %s\n' "$name" "$timing" "$(cat "$work/reason" 2>/dev/null || echo 'see logs')"
        printf '     logs: %s\n' "$work"
    fi
    for t in "$work"/times*; do
        [[ -s $t ]] || continue
        n=${t##*/times}
        printf '     boot %s: %s\n' "$n" "$(stage_times "$t" "$(cat "$work/files_end_ms$n" 2>/dev/null)")"
    done
    if [[ ${VM_KEEP:-} != 1 ]]; then rm -f "$work"/disk*.img; fi
done

# --- benchmark ---------------------------------------------------------------------------------
size() { stat -c %s "$1"; }
if [[ -n $initrd_ref ]]; then
    a=$(size "$initrd_agent")
    r=$(size "$initrd_ref")
    printf 'initramfs (zstd): %d KiB with the agent module, %d KiB without: the agent adds %d KiB (x%.2f); test image (+ test hook) %d KiB\n' \
        $((a / 1024)) $((r / 1024)) $(((a - r) / 1024)) "$(calc "$a / $r")" $(($(size "$initrd") / 1024))
    b=$(zstd -15 -q -c "$AGENT_BIN" | wc -c)
    printf '  of which the agent binary: %d KiB zstd -15 (%d KiB raw); what it adds, by what brought it in:\n' \
        $((b / 1024)) $(($(size "$AGENT_BIN") / 1024))
    python3 "$here/initramfs-sizes.py" "$initrd_agent" "$initrd_ref" || log "initramfs-sizes.py failed"
fi
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
