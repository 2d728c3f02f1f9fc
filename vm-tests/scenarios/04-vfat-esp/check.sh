# ESP: GPT type, vfat with label ESP (read with mtools: the host cannot mount vfat), the file on it.
expect_eq "$(part_count)" 2 "partition count"
expect_eq "$(part_get 1 name)" esp "partition 1 name"
expect_eq "$(part_get 1 type)" C12A7328-F81F-11D2-BA4B-00A0C93EC93B "ESP type GUID"
expect_eq "$(fs_get 1 TYPE)" vfat "ESP filesystem"
expect_eq "$(fs_get 1 LABEL)" ESP "ESP label"
esp=$(part_loop 1)
fsck.fat -n "$esp" >/dev/null || fail "fsck.fat reports errors on the ESP"
expect_eq "$(MTOOLS_SKIP_CHECK=1 mtype -i "$esp" ::/EFI/agent/hello.txt)" "hello esp" "file on the ESP"
expect_eq "$(fs_get 2 LABEL)" root "root label"
r=$(mount_part 2)
expect_content "$r/etc/agent-test/esp" root
# The file went to the ESP, not into the root filesystem's /boot/efi directory.
[[ ! -e $r/boot/efi/EFI/agent/hello.txt ]] || fail "ESP file written into the root filesystem"
expect_console "AGENT-TEST-DONE complete=yes"
