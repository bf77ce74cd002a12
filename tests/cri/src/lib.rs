//! A minimal, blocking CRI client: the calls kubelet makes for a pod
//! sandbox (run, status, stop, remove, list), for its containers (create,
//! start, status, stop, remove) and for the runtime's readiness
//! (`Status`), over the runtime's unix socket. The tests that
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
    /// `hostNetwork: true`: the node's network namespace, no CNI call.
    pub host_network: bool,
    /// A privileged container will run in it (kubelet then says so of
    /// the sandbox too).
    pub privileged: bool,
    /// Where the runtime writes its containers' logs (kubelet's
    /// `/var/log/pods/...`); empty: none.
    pub log_directory: String,
}

/// A directory of the node in a container, as a pod's `hostPath` volume
/// and the container's `volumeMounts` give it.
#[derive(Debug, Clone, Default)]
pub struct MountSpec {
    pub container_path: String,
    pub host_path: PathBuf,
    pub readonly: bool,
    /// `mountPropagation: HostToContainer`.
    pub host_to_container: bool,
}

/// A container of a pod, as kubelet describes it: an empty `command`
/// keeps the image's entry point, `args` replace its cmd.
#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub mounts: Vec<MountSpec>,
    /// Its `securityContext`, as kubelet passes it on.
    pub security: SecuritySpec,
    /// The log file, under the sandbox's `log_directory`.
    pub log_path: String,
}

/// A container's `securityContext`, as kubelet turns it into CRI's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecuritySpec {
    pub privileged: bool,
    /// `capabilities.drop` and `.add`, without the `CAP_` prefix
    /// (`ALL`, `NET_ADMIN`), as the manifest writes them.
    pub drop_capabilities: Vec<String>,
    pub add_capabilities: Vec<String>,
    /// `allowPrivilegeEscalation: false`: no_new_privs.
    pub no_new_privileges: bool,
    pub read_only_root: bool,
    /// `runAsUser`.
    pub run_as_user: Option<i64>,
    /// `seccompProfile: {type: RuntimeDefault}`.
    pub seccomp_runtime_default: bool,
}

/// Where a container is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

/// What `ContainerStatus` says of a container.
#[derive(Debug, Clone)]
pub struct ContainerStatus {
    pub state: ContainerState,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
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
        let request = proto::RunPodSandboxRequest {
            config: Some(sandbox_config(pod)),
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

    /// `CreateContainer` of `container` in the sandbox `sandbox_id` that
    /// `pod` describes: the container's ID.
    pub fn create_container(
        &mut self,
        sandbox_id: &str,
        pod: &PodSpec,
        container: &ContainerSpec,
    ) -> Result<String, CriError> {
        let mounts = container
            .mounts
            .iter()
            .map(|m| proto::Mount {
                container_path: m.container_path.clone(),
                host_path: m.host_path.display().to_string(),
                readonly: m.readonly,
                propagation: if m.host_to_container {
                    proto::MountPropagation::PropagationHostToContainer
                } else {
                    proto::MountPropagation::PropagationPrivate
                } as i32,
            })
            .collect();
        let config = proto::ContainerConfig {
            metadata: Some(proto::ContainerMetadata {
                name: container.name.clone(),
                attempt: 0,
            }),
            image: Some(proto::ImageSpec {
                image: container.image.clone(),
            }),
            command: container.command.clone(),
            args: container.args.clone(),
            envs: Vec::new(),
            mounts,
            labels: HashMap::from([(
                "io.kubernetes.container.name".into(),
                container.name.clone(),
            )]),
            annotations: HashMap::new(),
            log_path: container.log_path.clone(),
            linux: Some(proto::LinuxContainerConfig {
                security_context: Some(security_context(pod, &container.security)),
            }),
        };
        let request = proto::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_string(),
            config: Some(config),
            sandbox_config: Some(sandbox_config(pod)),
        };
        let client = &mut self.client;
        let reply = self
            .runtime
            .block_on(client.create_container(request))
            .map_err(|status| CriError::Call {
                method: "CreateContainer",
                status,
            })?;
        Ok(reply.into_inner().container_id)
    }

    /// `StartContainer`.
    pub fn start_container(&mut self, id: &str) -> Result<(), CriError> {
        let request = proto::StartContainerRequest {
            container_id: id.to_string(),
        };
        let client = &mut self.client;
        self.runtime
            .block_on(client.start_container(request))
            .map_err(|status| CriError::Call {
                method: "StartContainer",
                status,
            })?;
        Ok(())
    }

    /// `StopContainer`: SIGTERM (the image's stop signal), then SIGKILL
    /// after `timeout_s` seconds.
    pub fn stop_container(&mut self, id: &str, timeout_s: i64) -> Result<(), CriError> {
        let request = proto::StopContainerRequest {
            container_id: id.to_string(),
            timeout: timeout_s,
        };
        let client = &mut self.client;
        self.runtime
            .block_on(client.stop_container(request))
            .map_err(|status| CriError::Call {
                method: "StopContainer",
                status,
            })?;
        Ok(())
    }

    /// `RemoveContainer`.
    pub fn remove_container(&mut self, id: &str) -> Result<(), CriError> {
        let request = proto::RemoveContainerRequest {
            container_id: id.to_string(),
        };
        let client = &mut self.client;
        self.runtime
            .block_on(client.remove_container(request))
            .map_err(|status| CriError::Call {
                method: "RemoveContainer",
                status,
            })?;
        Ok(())
    }

    /// `ContainerStatus`.
    pub fn container_status(&mut self, id: &str) -> Result<ContainerStatus, CriError> {
        let request = proto::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        };
        let client = &mut self.client;
        let status = self
            .runtime
            .block_on(client.container_status(request))
            .map_err(|status| CriError::Call {
                method: "ContainerStatus",
                status,
            })?
            .into_inner()
            .status
            .unwrap_or_default();
        let state = match proto::ContainerState::try_from(status.state) {
            Ok(proto::ContainerState::ContainerCreated) => ContainerState::Created,
            Ok(proto::ContainerState::ContainerRunning) => ContainerState::Running,
            Ok(proto::ContainerState::ContainerExited) => ContainerState::Exited,
            _ => ContainerState::Unknown,
        };
        Ok(ContainerStatus {
            state,
            exit_code: status.exit_code,
            reason: status.reason,
            message: status.message,
        })
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

/// The sandbox's configuration as kubelet sends it, for `RunPodSandbox`
/// and again with each `CreateContainer`.
fn sandbox_config(pod: &PodSpec) -> proto::PodSandboxConfig {
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
    proto::PodSandboxConfig {
        metadata: Some(proto::PodSandboxMetadata {
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            namespace: pod.namespace.clone(),
            attempt: 0,
        }),
        // kubelet gives a host-network pod the node's name (no hostname
        // of its own: runc would need a UTS namespace to set one).
        hostname: if pod.host_network {
            String::new()
        } else {
            pod.name.clone()
        },
        log_directory: pod.log_directory.clone(),
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
            security_context: Some(proto::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                privileged: pod.privileged,
            }),
        }),
    }
}

/// The pod's namespaces as kubelet asks for them: the node's network for
/// `hostNetwork`, else the pod's; a pid namespace per container, the
/// pod's IPC.
fn namespace_options(pod: &PodSpec) -> proto::NamespaceOption {
    proto::NamespaceOption {
        network: if pod.host_network {
            proto::NamespaceMode::Node
        } else {
            proto::NamespaceMode::Pod
        } as i32,
        pid: proto::NamespaceMode::Container as i32,
        ipc: proto::NamespaceMode::Pod as i32,
    }
}

/// CRI's security context of a container, as kubelet fills it from the
/// container's `securityContext`: capabilities as the manifest names them
/// (CRI's have no `CAP_` prefix: the runtime adds it), seccomp in both
/// the field and the deprecated path, the namespaces of the pod.
fn security_context(pod: &PodSpec, sc: &SecuritySpec) -> proto::LinuxContainerSecurityContext {
    let seccomp = if sc.seccomp_runtime_default {
        proto::security_profile::ProfileType::RuntimeDefault
    } else {
        proto::security_profile::ProfileType::Unconfined
    };
    proto::LinuxContainerSecurityContext {
        capabilities: Some(proto::Capability {
            add_capabilities: sc.add_capabilities.clone(),
            drop_capabilities: sc.drop_capabilities.clone(),
        }),
        privileged: sc.privileged,
        namespace_options: Some(namespace_options(pod)),
        run_as_user: sc.run_as_user.map(|value| proto::Int64Value { value }),
        readonly_rootfs: sc.read_only_root,
        seccomp_profile_path: if sc.seccomp_runtime_default {
            "runtime/default".into()
        } else {
            "unconfined".into()
        },
        no_new_privs: sc.no_new_privileges,
        seccomp: Some(proto::SecurityProfile {
            profile_type: seccomp as i32,
            localhost_ref: String::new(),
        }),
    }
}
