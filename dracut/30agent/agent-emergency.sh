#!/bin/sh
# dracut emergency hook (emergency and shutdown-emergency, i.e. with or without rd.shell): show
# the log of the failed provisioning stage on the console, and where the full log and the
# stage's summary are (docs/reports.md, "The console"). Lines start with AGENT-FAILED:.
_agent_shown=
for _u in agent-install agent-fetch-offline agent-fetch agent-disks agent-files agent-firstboot-done; do
    if systemctl -q is-failed "$_u.service" 2>/dev/null; then
        _agent_shown=1
        {
            echo "AGENT-FAILED: $_u.service failed; its log follows"
            journalctl -q -o cat --no-pager -u "$_u.service" 2>/dev/null | tail -n 60
            echo "AGENT-FAILED: end of $_u.service log"
        } >/dev/console 2>&1
    fi
done
if [ -z "$_agent_shown" ] && [ -e /run/agent/platform.env ] && [ ! -e /run/agent/complete ]; then
    {
        echo "AGENT-FAILED: provisioning did not complete; agent log follows"
        journalctl -q -o cat --no-pager -u 'agent-*' 2>/dev/null | tail -n 60
        echo "AGENT-FAILED: end of agent log"
    } >/dev/console 2>&1
fi
if [ -e /run/agent/agent.log ]; then
    {
        echo "AGENT-FAILED: summary: see the lines \"agent: the <stage> stage FAILED\" above (what, why, what to check)"
        echo "AGENT-FAILED: full log: /run/agent/agent.log (and /var/log/agent/agent.log in the new root once the files stage mounted it)"
    } >/dev/console 2>&1
fi
unset _u _agent_shown
