//! `devinfo --json`: the same information as `-v`, as one JSON document.

use erdma::port::{mtu_text, speed_gbps, width_lanes};
use erdma::{AtomicCap, Guid, LinkLayer, PhysState, PortState, Transport};
use serde_json::{Value, json};

use super::report::{DeviceReport, PortReport};

fn port_json(d: &DeviceReport, p: &PortReport) -> Value {
    let a = &p.attr;
    let rate = match (width_lanes(a.active_width), speed_gbps(a.active_speed)) {
        (Some(l), Some(s)) => json!(f64::from(l) * s),
        _ => Value::Null,
    };
    let gids: Vec<Value> = p
        .gids
        .iter()
        .map(|g| {
            json!({
                "index": g.index,
                "gid": g.gid.to_string(),
                "ipv4": g.gid.to_ipv4().map(|ip| ip.to_string()),
                "type": g.gid_type.map(|t| t.to_string()),
                "netdev": g.netdev,
            })
        })
        .collect();
    json!({
        "port": p.port,
        "state": PortState::from_raw(a.state).to_string(),
        "state_num": a.state,
        "max_mtu": mtu_text(a.max_mtu),
        "active_mtu": mtu_text(a.active_mtu),
        "sm_lid": a.sm_lid,
        "port_lid": a.lid,
        "port_lmc": a.lmc,
        "link_layer": LinkLayer::from_raw(a.link_layer).to_string(),
        "max_msg_sz": a.max_msg_sz,
        "port_cap_flags": a.port_cap_flags,
        "port_cap_flags2": a.port_cap_flags2,
        "max_vl_num": a.max_vl_num,
        "bad_pkey_cntr": a.bad_pkey_cntr,
        "qkey_viol_cntr": a.qkey_viol_cntr,
        "sm_sl": a.sm_sl,
        "pkey_tbl_len": a.pkey_tbl_len,
        "gid_tbl_len": a.gid_tbl_len,
        "subnet_timeout": a.subnet_timeout,
        "init_type_reply": a.init_type_reply,
        "active_width": a.active_width,
        "active_speed": a.active_speed,
        "rate_gbps": rate,
        "phys_state": (d.transport == erdma::sys::IBV_TRANSPORT_IB)
            .then(|| PhysState::from_raw(a.phys_state).to_string()),
        "gids": gids,
    })
}

/// One device as JSON.
pub fn device_json(d: &DeviceReport) -> Value {
    let a = &d.attr;
    let o = &a.orig_attr;
    let mut m = serde_json::Map::new();
    if let Value::Object(part) = json!({
        "hca_id": d.name,
        "transport": Transport::from_raw(d.transport).to_string(),
        "transport_type": d.transport,
        "fw_ver": d.fw_ver(),
        "node_guid": Guid::from_be(o.node_guid).to_string(),
        "sys_image_guid": Guid::from_be(o.sys_image_guid).to_string(),
        "vendor_id": o.vendor_id,
        "vendor_part_id": o.vendor_part_id,
        "hw_ver": o.hw_ver,
        "board_id": d.board_id,
        "is_erdma": o.vendor_id == erdma::ERDMA_VENDOR_ID && o.vendor_part_id == erdma::ERDMA_VENDOR_PART_ID,
        "phys_port_cnt": o.phys_port_cnt,
        "max_mr_size": o.max_mr_size,
        "page_size_cap": o.page_size_cap,
        "max_qp": o.max_qp,
        "max_qp_wr": o.max_qp_wr,
        "device_cap_flags": o.device_cap_flags,
        "max_sge": o.max_sge,
        "max_sge_rd": o.max_sge_rd,
        "max_cq": o.max_cq,
    }) {
        m.extend(part);
    }
    if let Value::Object(part) = json!({
        "max_cqe": o.max_cqe,
        "max_mr": o.max_mr,
        "max_pd": o.max_pd,
        "max_qp_rd_atom": o.max_qp_rd_atom,
        "max_ee_rd_atom": o.max_ee_rd_atom,
        "max_res_rd_atom": o.max_res_rd_atom,
        "max_qp_init_rd_atom": o.max_qp_init_rd_atom,
        "max_ee_init_rd_atom": o.max_ee_init_rd_atom,
        "atomic_cap": AtomicCap::from_raw(o.atomic_cap).to_string(),
        "max_ee": o.max_ee,
        "max_rdd": o.max_rdd,
        "max_mw": o.max_mw,
        "max_raw_ipv6_qp": o.max_raw_ipv6_qp,
        "max_raw_ethy_qp": o.max_raw_ethy_qp,
        "max_mcast_grp": o.max_mcast_grp,
        "max_mcast_qp_attach": o.max_mcast_qp_attach,
        "max_total_mcast_qp_attach": o.max_total_mcast_qp_attach,
        "max_ah": o.max_ah,
        "max_fmr": o.max_fmr,
        "max_map_per_fmr": o.max_map_per_fmr,
    }) {
        m.extend(part);
    }
    if let Value::Object(part) = json!({
        "max_srq": o.max_srq,
        "max_srq_wr": o.max_srq_wr,
        "max_srq_sge": o.max_srq_sge,
        "max_pkeys": o.max_pkeys,
        "local_ca_ack_delay": o.local_ca_ack_delay,
        "general_odp_caps": a.odp_caps.general_caps,
        "rc_odp_caps": a.odp_caps.per_transport_caps.rc_odp_caps,
        "uc_odp_caps": a.odp_caps.per_transport_caps.uc_odp_caps,
        "ud_odp_caps": a.odp_caps.per_transport_caps.ud_odp_caps,
        "xrc_odp_caps": a.xrc_odp_caps,
        "completion_timestamp_mask": a.completion_timestamp_mask,
        "hca_core_clock_khz": a.hca_core_clock,
        "raw_packet_caps": a.raw_packet_caps,
        "device_cap_flags_ex": a.device_cap_flags_ex,
        "max_tso": a.tso_caps.max_tso,
        "max_wq_type_rq": a.max_wq_type_rq,
        "max_dm_size": a.max_dm_size,
        "num_comp_vectors": d.num_comp_vectors,
        "ports": d.ports.iter().map(|p| port_json(d, p)).collect::<Vec<_>>(),
    }) {
        m.extend(part);
    }
    Value::Object(m)
}
