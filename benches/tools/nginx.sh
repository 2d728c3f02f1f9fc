# The nginx reference of benches/serve.sh and benches/fleet.sh, sourced by both: an nginx
# configuration serving TMP/www as static files on 127.0.0.1:PORT the way agent serve sends a
# config (sendfile, long keep-alive, a deep backlog, and `deferred`: TCP_DEFER_ACCEPT of 1 s,
# as agent serve's default `--defer-accept 1`, so both are measured accepting the same way),
# its files under TMP.
# nginx_conf TMP PORT LOG_LINE [SERVER_LINES]: LOG_LINE e.g. `access_log off;`; SERVER_LINES
# go inside the server block (fleet.sh answers POST /report there).
nginx_conf() {
    cat <<NGX
user root;
worker_processes auto;
daemon off;
pid $1/nginx.pid;
error_log $1/nginx-error.log;
events { worker_connections 20000; }
http {
    $3
    client_body_temp_path $1/ngx-body;
    proxy_temp_path $1/ngx-proxy;
    fastcgi_temp_path $1/ngx-fastcgi;
    uwsgi_temp_path $1/ngx-uwsgi;
    scgi_temp_path $1/ngx-scgi;
    keepalive_requests 10000000;
    keepalive_timeout 60s;
    sendfile on;
    tcp_nopush on;
    open_file_cache max=100;
    server {
        listen 127.0.0.1:$2 backlog=4096 deferred;
        root $1/www;
        default_type application/vnd.coreos.ignition+json;
        ${4:-}
    }
}
NGX
}
