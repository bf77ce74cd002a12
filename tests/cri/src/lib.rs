//! A minimal, blocking CRI client: the calls kubelet makes for a pod
//! sandbox (run, status, stop, remove, list) and for the runtime's
//! readiness (`Status`), over the runtime's unix socket. The tests that
//! start a real containerd drive it with this, as kubelet would.
//!
//! Each call runs on a current-thread tokio runtime owned by the client, so
//! the tests stay synchronous.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The generated CRI messages and client (`proto/cri.proto`).
pub mod proto {
    tonic::include_proto!("runtime.v1");
}

use proto::runtime_service_client::RuntimeServiceClient;

/// What went wrong in a call: the transport, or the runtime's own status.
#[derive(Debug)]
pub enum CriError {
    Connect(String),
    Call {
        method: &'static str,
        status: tonic::Status,
    },
}

impl std::fmt::Display for CriError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CriError::Connect(e) => write!(f, "connecting to the CRI socket: {e}"),
            CriError::Call { method, status } => {
                write!(f, "{method}: {:?}: {}", status.code(), status.message())
            }
        }
    }
}

impl std::error::Error for CriError {}

/// A sandbox to run, as kubelet describes a pod.
#[derive(Debug, Clone, Default)]
pub struct PodSpec {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// `(host port, container port, protocol, host IP)`, protocol `tcp`,
    /// `udp` or `sctp`.
    pub ports: Vec<(i32, i32, &'static str, String)>,
    /// Pod annotations (`kubernetes.io/ingress-bandwidth`, ...).
    pub annotations: HashMap<String, String>,
    pub cgroup_parent: String,
}

/// What `PodSandboxStatus` says of a sandbox.
#[derive(Debug, Clone)]
pub struct SandboxStatus {
    pub ready: bool,
    /// The pod's primary IP, then the others, as the runtime reports them.
    pub ips: Vec<String>,
    /// The `info` map of a verbose status (JSON values).
    pub info: HashMap<String, String>,
}

/// The runtime's `NetworkReady` condition.
#[derive(Debug, Clone)]
pub struct NetworkCondition {
    pub ready: bool,
    pub reason: String,
    pub message: String,
}

/// A connection to a CRI runtime service.
pub struct CriClient {
    runtime: tokio::runtime::Runtime,
    client: RuntimeServiceClient<tonic::transport::Channel>,
}

impl CriClient {
    /// Connects to the runtime at `socket` (a unix socket path).
    pub fn connect(socket: &Path) -> Result<CriClient, CriError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CriError::Connect(e.to_string()))?;
        let path: PathBuf = socket.to_path_buf();
        let channel = runtime
            .block_on(async move {
                // The URI is required by the API and never used: the
                // connector dials the socket.
                tonic::transport::Endpoint::try_from("http://cri.invalid")?
                    .connect_timeout(Duration::from_secs(10))
                    .timeout(Duration::from_secs(120))
                    .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                        let path = path.clone();
                        async move {
                            let stream = tokio::net::UnixStream::connect(path).await?;
                            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                        }
                    }))
                    .await
            })
            .map_err(|e| CriError::Connect(format!("{}: {e}", socket.display())))?;
        Ok(CriClient {
            runtime,
            client: RuntimeServiceClient::new(channel),
        })
    }

    /// `RunPodSandbox`: the sandbox's ID.
    pub fn run_pod_sandbox(&mut self, pod: &PodSpec) -> Result<String, CriError> {
        let port_mappings = pod
            .ports
            .iter()
            .map(|(host, container, protocol, host_ip)| proto::PortMapping {
                protocol: match *protocol {
                    "udp" => proto::Protocol::Udp,
                    "sctp" => proto::Protocol::Sctp,
                    _ => proto::Protocol::Tcp,
                } as i32,
                container_port: *container,
                host_port: *host,
                host_ip: host_ip.clone(),
            })
            .collect();
        let config = proto::PodSandboxConfig {
            metadata: Some(proto::PodSandboxMetadata {
                name: pod.name.clone(),
                uid: pod.uid.clone(),
                namespace: pod.namespace.clone(),
                attempt: 0,
            }),
            hostname: pod.name.clone(),
            log_directory: String::new(),
            dns_config: None,
            port_mappings,
            labels: HashMap::from([
                ("io.kubernetes.pod.name".into(), pod.name.clone()),
                ("io.kubernetes.pod.namespace".into(), pod.namespace.clone()),
                ("io.kubernetes.pod.uid".into(), pod.uid.clone()),
            ]),
            annotations: pod.annotations.clone(),
            linux: Some(proto::LinuxPodSandboxConfig {
                cgroup_parent: pod.cgroup_parent.clone(),
            }),
        };
        let request = proto::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        };
        let client = &mut self.client;
        let reply = self
            .runtime
            .block_on(client.run_pod_sandbox(request))
            .map_err(|status| CriError::Call {
                method: "RunPodSandbox",
                status,
            })?;
        Ok(reply.into_inner().pod_sandbox_id)
    }

    /// `PodSandboxStatus` (verbose).
    pub fn pod_sandbox_status(&mut self, id: &str) -> Result<SandboxStatus, CriError> {
        let request = proto::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: true,
        };
        let client = &mut self.client;
        let reply = self
            .runtime
            .block_on(client.pod_sandbox_status(request))
            .map_err(|status| CriError::Call {
                method: "PodSandboxStatus",
                status,
            })?
            .into_inner();
        let status = reply.status.unwrap_or_default();
        let mut ips = Vec::new();
        if let Some(network) = status.network {
            if !network.ip.is_empty() {
                ips.push(network.ip);
            }
            ips.extend(network.additional_ips.into_iter().map(|p| p.ip));
        }
        Ok(SandboxStatus {
            ready: status.state == proto::PodSandboxState::SandboxReady as i32,
            ips,
            info: reply.info,
        })
    }

    /// `StopPodSandbox`.
    pub fn stop_pod_sandbox(&mut self, id: &str) -> Result<(), CriError> {
        let request = proto::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        let client = &mut self.client;
        self.runtime
            .block_on(client.stop_pod_sandbox(request))
            .map_err(|status| CriError::Call {
                method: "StopPodSandbox",
                status,
            })?;
        Ok(())
    }

    /// `RemovePodSandbox`.
    pub fn remove_pod_sandbox(&mut self, id: &str) -> Result<(), CriError> {
        let request = proto::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        let client = &mut self.client;
        self.runtime
            .block_on(client.remove_pod_sandbox(request))
            .map_err(|status| CriError::Call {
                method: "RemovePodSandbox",
                status,
            })?;
        Ok(())
    }

    /// `ListPodSandbox`: the IDs of every sandbox the runtime knows.
    pub fn list_pod_sandboxes(&mut self) -> Result<Vec<String>, CriError> {
        let client = &mut self.client;
        let reply = self
            .runtime
            .block_on(client.list_pod_sandbox(proto::ListPodSandboxRequest {}))
            .map_err(|status| CriError::Call {
                method: "ListPodSandbox",
                status,
            })?;
        Ok(reply.into_inner().items.into_iter().map(|s| s.id).collect())
    }

    /// `Status`: the runtime's `NetworkReady` condition.
    pub fn network_condition(&mut self) -> Result<NetworkCondition, CriError> {
        let client = &mut self.client;
        let reply = self
            .runtime
            .block_on(client.status(proto::StatusRequest { verbose: false }))
            .map_err(|status| CriError::Call {
                method: "Status",
                status,
            })?
            .into_inner();
        let condition = reply
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.r#type == "NetworkReady")
            .unwrap_or_default();
        Ok(NetworkCondition {
            ready: condition.status,
            reason: condition.reason,
            message: condition.message,
        })
    }
}
